"""Lambda entry point for API Gateway: ``handlers.api.handler``.

The engine is built on the first request and kept for the container's life; configuration
comes from the environment (``docs/aws-runtime.md``).
"""

from weft_serverless.aws import make_api_handler

handler = make_api_handler()
