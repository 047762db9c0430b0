"""Logs and metrics of an invocation: JSON lines with the workflow and correlation ids,
and one EMF document of the engine's counters per invocation."""

from __future__ import annotations

import threading

import pytest
from aws_support import Api, emf_documents, log_lines

from weft_serverless.aws import scope


def test_every_log_line_carries_the_workflow_and_correlation_ids(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    body = {"workflow_type": "greeter", "id": "g-7", "input": "ada"}
    api("POST", "/workflows", body, headers={"X-Correlation-Id": "corr-1"})

    lines = log_lines(capsys.readouterr().out)
    workflow_line = next(line for line in lines if line["message"] == "greeting ada")
    request_line = next(line for line in lines if line["message"] == "request")
    for line in (workflow_line, request_line):
        assert line["workflow_id"] == "g-7"
        assert line["correlation_id"] == "corr-1"
        assert line["service"] == "weft-test"
        assert line["function_name"] == "weft-local"
    assert workflow_line["name"] == "weft_serverless.workflow"  # the engine's own logger
    assert request_line["status"] == 201
    assert request_line["path"] == "/workflows"


def test_keys_do_not_leak_into_the_next_invocation(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    api("GET", "/workflows/one", headers={"X-Correlation-Id": "first"})
    capsys.readouterr()
    api("GET", "/workflows")
    [line] = [line for line in log_lines(capsys.readouterr().out) if line["message"] == "request"]
    assert "workflow_id" not in line
    assert line["correlation_id"].startswith("req-")


def test_the_first_invocation_of_a_container_is_a_cold_start(
    api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scope, "_cold", threading.Event())
    api("GET", "/workflows")
    api("GET", "/workflows")
    lines = [line for line in log_lines(capsys.readouterr().out) if line["message"] == "request"]
    assert [line["cold_start"] for line in lines] == [True, False]


def test_emf_document_shape(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "g", "input": "x"})

    [emf] = emf_documents(capsys.readouterr().out)
    [directive] = emf["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "WeftTest"
    assert directive["Dimensions"] == [["Handler", "service"]]
    assert emf["Handler"] == "api" and emf["service"] == "weft-test"
    assert isinstance(emf["_aws"]["Timestamp"], int)
    names = [metric["Name"] for metric in directive["Metrics"]]
    assert names[:7] == [
        "StepsCommitted",
        "ActivityAttempts",
        "ActivityRetries",
        "TimersFired",
        "WorkflowsCompleted",
        "WorkflowsFailed",
        "LostCommits",
    ]
    assert {metric["Unit"] for metric in directive["Metrics"]} == {"Count"}
    assert emf["StepsCommitted"] == [1.0]  # the activity step
    assert emf["ActivityAttempts"] == [1.0]
    assert emf["WorkflowsCompleted"] == [1.0]


def test_each_invocation_emits_only_its_own_deltas(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "a"})
    capsys.readouterr()
    api("GET", "/workflows/a")
    [emf] = emf_documents(capsys.readouterr().out)
    assert emf["StepsCommitted"] == [0.0]
    assert emf["WorkflowsCompleted"] == [0.0]
