"""The run page's layout in Chromium with a long step label: an ``all`` of 25 children made
the page 4,074 px wide and the actions panel covered the timeline."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from examples.workflows import workflows as example_workflows
from weft_serverless import Engine, WorkflowContext, WorkflowDefinition, workflow

ACTIVITY = "reconcile_ledger_entries_for_the_quarter"


def _wide(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, None]:
    yield ctx.all(*[ctx.run(ACTIVITY, n) for n in range(25)])
    yield ctx.wait_for_signal("close")


@pytest.fixture
def registry() -> dict[str, WorkflowDefinition]:
    wide = workflow("wide").activities(**{ACTIVITY: lambda n: n}).execute(_wide)
    return {**example_workflows, "wide": wide}


BOXES = """() => {
  const box = (element) => element.getBoundingClientRect().toJSON();
  const section = document.querySelector('[data-testid="run-section"]');
  return {
    section: [section.scrollWidth, section.clientWidth],
    scroll: document.documentElement.scrollWidth,
    client: document.documentElement.clientWidth,
    timeline: box(document.querySelector('[data-testid="timeline"]')),
    events: box(document.querySelector('[data-testid="events"]')),
    actions: box(document.querySelector('[data-testid="actions"]')),
  };
}"""


@pytest.mark.parametrize("width", [1280, 800])
def test_a_long_step_label_neither_widens_the_page_nor_hides_under_the_actions(
    page: Any, live_url: str, engine: Engine, width: int
) -> None:
    engine.start("wide", None, id="w1")
    assert engine.describe("w1").status == "running"
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_url}runs/w1")
    page.get_by_test_id("timeline").wait_for()
    seen = page.evaluate(BOXES)
    assert seen["scroll"] <= seen["client"], seen
    if width >= 1280:  # wide enough for the whole timeline: the section does not scroll
        assert seen["section"][0] <= seen["section"][1], seen
    actions = seen["actions"]
    for part in ("timeline", "events"):
        box = seen[part]
        apart = (
            box["right"] <= actions["left"]
            or actions["right"] <= box["left"]
            or box["bottom"] <= actions["top"]
            or actions["bottom"] <= box["top"]
        )
        assert apart, (part, box, actions)
