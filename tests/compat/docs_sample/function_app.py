import logging

import azure.functions as func

app = func.FunctionApp()


@app.queue_trigger(arg_name="azqueue", queue_name="myqueue-items", connection="AzureWebJobsStorage")
def queue_trigger(azqueue: func.QueueMessage):
    logging.info("Python Queue trigger processed a message: %s", azqueue.get_body().decode("utf-8"))
