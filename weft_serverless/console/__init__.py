"""``weft console``: an operator's web console on any store the ``weft`` command reaches.

A small Flask (WSGI) app that renders HTML on the server, with htmx for live refresh and
partial updates; its templates and static files ship inside the wheel, and no build step
makes them. It is an optional extra (``pip install 'weft-serverless[console]'``): nothing
under ``weft_serverless`` outside this package imports it, so the Lambda path never loads
Flask. Every action goes through ``aws.calls.call``, the path the HTTP API and the CLI take,
so the console cannot validate or act differently from them. See docs/decisions/0034.
"""
