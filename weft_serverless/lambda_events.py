"""Lambda's side of the wire, for running handlers outside AWS: events in, responses out.

``weft dev`` turns each HTTP request into the event API Gateway would send (a REST proxy
event, shaped for the deployed ``/workflows`` and ``/activities`` resources; ``http_event``
builds the payload 2.0 event of an HTTP API or a function URL instead), each tick into
the event an EventBridge schedule sends, and each handler answer back into HTTP the way API
Gateway reads it. The example tests use the same builders, so they pin what ``weft dev``
hands to Lambda code.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

ACCOUNT = "123456789012"
STAGE = "dev"
DEFAULT_REGION = "us-east-1"
INTERNAL_ERROR = b'{"message": "Internal server error"}'


def lambda_context(function: str, budget_seconds: float, region: str) -> Any:
    """A Lambda context for one invocation of ``function``, with ``budget_seconds`` left."""
    from weft_serverless.aws.context import LocalContext

    return LocalContext(
        timeout_seconds=budget_seconds,
        function_name=function,
        memory_limit_in_mb=1024,
        invoked_function_arn=f"arn:aws:lambda:{region}:{ACCOUNT}:function:{function}",
    )


def rest_event(
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    source_ip: str = "127.0.0.1",
) -> dict[str, Any]:
    """An API Gateway REST proxy event, shaped as the deployed API sends it.

    ``resource`` and ``pathParameters`` follow the deployed resources (``/workflows``,
    ``/workflows/{proxy+}``, ``/activities/{proxy+}``); the resolver routes on ``path``.
    """
    split = urlsplit(target)
    path = split.path or "/"
    multi_headers: dict[str, list[str]] = {}
    for name, value in headers:
        multi_headers.setdefault(name, []).append(value)
    query = parse_qs(split.query, keep_blank_values=True)
    top, _, rest = path.lstrip("/").partition("/")
    resource, path_parameters = (f"/{top}/{{proxy+}}", {"proxy": rest}) if rest else (path, None)
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    now = time.time()
    request_id = str(uuid.uuid4())
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": {name: values[-1] for name, values in multi_headers.items()} or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": path_parameters,
        "stageVariables": None,
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "weftdev",
            "domainName": "localhost",
            "httpMethod": method,
            "path": f"/{STAGE}{path}",
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "extendedRequestId": request_id,
            "requestTime": dt.datetime.fromtimestamp(now, dt.UTC).strftime(
                "%d/%b/%Y:%H:%M:%S +0000"
            ),
            "requestTimeEpoch": int(now * 1000),
            "resourcePath": resource,
            "stage": STAGE,
            "identity": {
                "sourceIp": source_ip,
                "userAgent": multi_headers.get("User-Agent", [""])[-1],
                "caller": None,
                "user": None,
                "userArn": None,
                "accountId": None,
                "accessKey": None,
            },
        },
        "body": text if body else None,
        "isBase64Encoded": encoded,
    }


def http_event(
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    source_ip: str = "127.0.0.1",
    *,
    function_url: bool = False,
    region: str = DEFAULT_REGION,
) -> dict[str, Any]:
    """A payload 2.0 event: an API Gateway HTTP API (``$default`` stage and route), or a
    Lambda function URL with ``function_url=True``.

    Unlike a REST event: header names are lower case and repeated values are joined with
    commas (so are repeated query parameters), cookies travel apart from the headers, the
    method and source address live under ``requestContext.http``, and ``rawPath`` carries no
    stage prefix. An HTTP API hands over the path percent-decoded; a function URL, like a
    REST API, as it was sent.
    """
    split = urlsplit(target)
    path = split.path or "/"
    if not function_url:
        path = unquote(path)
    joined: dict[str, list[str]] = {}
    cookies: list[str] = []
    for name, value in headers:
        if name.lower() == "cookie":
            cookies.extend(part.strip() for part in value.split(";") if part.strip())
        else:
            joined.setdefault(name.lower(), []).append(value)
    query = parse_qs(split.query, keep_blank_values=True)
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    now = time.time()
    api_id = "weftdevurl" if function_url else "weftdevhttp"
    domain = (
        f"{api_id}.lambda-url.{region}.on.aws"
        if function_url
        else f"{api_id}.execute-api.{region}.amazonaws.com"
    )
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": split.query,
        "headers": {name: ",".join(values) for name, values in joined.items()},
        "requestContext": {
            "accountId": "anonymous" if function_url else ACCOUNT,
            "apiId": api_id,
            "domainName": domain,
            "domainPrefix": api_id,
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": ",".join(joined.get("user-agent", [])),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": dt.datetime.fromtimestamp(now, dt.UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": encoded,
    }
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = {k: ",".join(v) for k, v in query.items()}
    if body:
        event["body"] = text
    return event


def scheduled_event(region: str, rule: str = "weft-dev-maintenance") -> dict[str, Any]:
    """An EventBridge Scheduled Event, as a ``rate(...)`` rule delivers it."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:events:{region}:{ACCOUNT}:rule/{rule}"],
        "detail": {},
    }


def sqs_event(bodies: Iterable[str], queue: str = "weft-dev-timer-hints") -> dict[str, Any]:
    """An SQS event as an event source mapping delivers a batch of messages."""
    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": str(uuid.uuid4()),
                "body": body,
                "attributes": {},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-east-1:{ACCOUNT}:{queue}",
            }
            for body in bodies
        ]
    }


def response_parts(response: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers and body bytes from a Lambda proxy response, as API Gateway reads it
    (either payload version: 2.0 adds ``cookies``, sent back as ``Set-Cookie``)."""
    if not isinstance(response, Mapping) or "statusCode" not in response:
        return 502, [("Content-Type", "application/json")], INTERNAL_ERROR
    headers: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name, values in (response.get("multiValueHeaders") or {}).items():
        seen.add(name.lower())
        headers.extend((name, str(value)) for value in values)
    for name, value in (response.get("headers") or {}).items():
        if name.lower() not in seen:
            headers.append((name, str(value)))
    headers.extend(("Set-Cookie", str(cookie)) for cookie in response.get("cookies") or ())
    headers = [(n, v) for n, v in headers if n.lower() not in ("content-length", "connection")]
    body = response.get("body") or ""
    payload = base64.b64decode(body) if response.get("isBase64Encoded") else str(body).encode()
    return int(response["statusCode"]), headers, payload
