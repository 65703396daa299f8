"""Azure Functions (and Lambda) compatibility: loading an app, and running an unchanged one.

- :mod:`.discovery`: find the app as Functions does (``function_app.py``, else a
  v1 app's function folders, else a SAM ``template.yaml``), and its folder,
  from the files alone;
- :mod:`.loading`: import it, as a ``WorkerApp``;
- :mod:`.converted`: what a conversion gives (the app, what is not run, the problems);
- :mod:`.functions`: an unchanged ``azure.functions.FunctionApp``, or any list
  of azure-functions ``Function`` objects, converted into a ``WorkerApp``;
- :mod:`.function_json`: a v1 app, each ``function.json`` described as the v2
  decorators would, its module imported as ``__app__.<folder>``;
- :mod:`.tracebacks`: an import failure told by the app's own frames;
- :mod:`.cloudformation`: a template's short tags read, its intrinsic functions worked out;
- :mod:`.sam`: a SAM template's SQS-triggered Lambda functions as a ``WorkerApp``;
- :mod:`.lambda_sqs`: Lambda's event and context, and what a handler's answer means for each record;
- :mod:`.lambda_filters`: an event source's ``FilterCriteria``, matched as Lambda matches them.

Everything that knows ``azure.functions`` lives here, converted at load time
into a :class:`worker.WorkerApp`, so the runtime never sees it. Only
:mod:`worker.ops` imports it.
"""
