"""Azure Functions compatibility: loading an app, and running an unchanged ``azure.functions.FunctionApp`` or v1 app.

Everything that knows ``azure.functions`` lives here, converted at load time
into a :class:`worker.WorkerApp`, so the runtime never sees it. May import
the runtime's layers below it; only ``worker.ops`` imports it.
"""
