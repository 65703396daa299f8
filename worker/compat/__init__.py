"""Azure Functions (and Lambda) compatibility: loading an app, and running an unchanged one.

Finding and loading: :mod:`.discovery`, :mod:`.loading`, :mod:`.converted`, :mod:`.tracebacks`.
Azure Functions: :mod:`.functions` (a v2 ``FunctionApp``) and :mod:`.function_json` (a v1 app).
Lambda: :mod:`.sam`, :mod:`.cloudformation`, :mod:`.lambda_sqs`, :mod:`.lambda_filters`.
Everything that knows ``azure.functions`` lives here, converted at load time into a :class:`worker.WorkerApp`.
The runtime never sees it; only :mod:`worker.ops` imports this package.
"""
