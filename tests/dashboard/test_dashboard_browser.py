"""The dashboard in a real browser (Debian's Chromium driven by Playwright) against a real
server and worker, on SQLite and on PostgreSQL: log in, read every page, find a task by its
source id and open its timeline, approve a held task and watch it complete, requeue a dead
letter; a submitter is offered no action and refused one posted anyway; a form post without
the session's CSRF token is refused. Each page's screenshot is written under the test's
directory."""

from __future__ import annotations

from dash_site import (
    DEAD_TYPE,
    DONE_TYPE,
    HOLD_PATTERN,
    Site,
    add_log,
    login,
    screenshot,
    until,
)
from playwright.sync_api import Browser, Page, expect

TRACEBACK = """Traceback (most recent call last):
  File "handlers.py", line 12, in triage
    number = payload["issue"]["number"]
KeyError: 'issue'"""
"""A handler's traceback, as a worker keeps it with the attempt."""


def test_login_then_every_page_reads_without_javascript(browser: Browser, site: Site) -> None:
    """The login form starts a session (an HttpOnly, SameSite=Strict cookie, the token in no
    page); every page then reads with scripts turned off, and a wrong token is refused."""
    page = login(browser, site, site.server.admin_secret, java_script_enabled=False)
    try:
        [cookie] = [c for c in page.context.cookies() if c["name"] == "aq_session"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        assert page.locator("svg.chart").count() >= 5  # depth, and 2 charts per window
        for path, heading in [
            ("/tasks", "Tasks"),
            ("/approvals", "Held for approval"),
            ("/dead-letters", "Dead letters"),
            ("/schedules", "Schedules"),
            ("/paused", "Paused task types"),
        ]:
            page.goto(site.url + path)
            expect(page.get_by_role("heading", name=heading)).to_be_visible()
            assert site.server.admin_secret not in page.content()
            screenshot(site, page, path.strip("/"))
        page.get_by_role("button", name="Log out").click()
        page.wait_for_url("**/login**")
        page.fill("#token", "aq_notatoken_0000")
        page.click("button[type=submit]")
        expect(page.get_by_role("alert")).to_contain_text("does not work")
    finally:
        page.context.close()


def test_find_a_task_by_source_id_and_open_its_timeline(admin_page: Page, site: Site) -> None:
    """The tasks page filters by source id; the task page shows its fields, its verified
    audit chain and each event, and its dependencies as a graph."""
    page = admin_page
    wanted = site.source_ids[5]  # depends on another task
    page.goto(site.url + "/tasks")
    page.fill("input[name=source_id]", wanted)
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.tasks tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(wanted)
    rows.first.get_by_role("link").click()
    expect(page.locator("#chain")).to_contain_text("Audit chain verified")
    expect(page.locator("table.timeline")).to_contain_text("submit")
    expect(page.locator("svg.graph")).to_be_visible()
    task_id = page.url.rsplit("/", 1)[1]
    until(lambda: site.task(task_id)["state"] == "completed", "completion")
    add_log(site, site.task(task_id), "traceback", TRACEBACK)
    page.reload()
    expect(page.locator("table.timeline")).to_contain_text("complete")
    expect(page.locator("pre.output")).to_contain_text("applied the patch")
    expect(page.locator("pre.traceback")).to_contain_text("KeyError: 'issue'")
    screenshot(site, page, "task")
    page.goto(site.url + "/")
    expect(page.locator("svg.chart").first).to_be_visible()
    screenshot(site, page, "overview")


def test_approve_a_held_task_and_see_it_complete(admin_page: Page, site: Site) -> None:
    """A task a guardrail holds is listed under approvals; approving it with a reason releases
    it, the worker runs it, and its page shows it completed with the approval event."""
    held = site.submit(title=f"Rotate keys ({HOLD_PATTERN})", task_type=DONE_TYPE)
    assert held["state"] == "blocked"
    page = admin_page
    page.goto(site.url + "/approvals")
    row = page.locator("tr", has_text="Rotate keys")
    row.locator("input[name=reason]").fill("checked the diff")
    row.get_by_role("button", name="Approve").click()
    expect(page.locator(".notice")).to_contain_text("approved")
    site.wait_for(held["id"], {"completed"})
    page.goto(f"{site.url}/tasks/{held['id']}")
    expect(page.locator("h1 .state")).to_have_text("completed")
    expect(page.locator("table.timeline")).to_contain_text("checked the diff")
    screenshot(site, page, "approved")


def test_requeue_a_dead_letter(admin_page: Page, site: Site) -> None:
    """A dead letter ticked on the dead-letters page and requeued leaves the dead-letter
    state, with a requeue event by the token that did it."""
    dead = site.submit(title="Sync prices", task_type=DEAD_TYPE, max_retries=0)
    site.wait_for(dead["id"], {"dead_letter"})
    page = admin_page
    page.goto(site.url + "/dead-letters")
    page.locator(f"input[name=task_id][value='{dead['id']}']").check()
    page.fill("input[name=reason]", "upstream fixed")
    screenshot(site, page, "dead-letters")
    page.get_by_role("button", name="Requeue ticked").click()
    expect(page.locator(".notice")).to_contain_text("requeue: 1 task")
    events = site.api("GET", f"/v1/tasks/{dead['id']}/events")
    requeues = [e for e in events if e["action"] == "requeue"]
    assert requeues and requeues[-1]["actor"] == "admin"
    assert requeues[-1]["reason"] == "upstream fixed"


def test_a_submitter_is_offered_no_action_and_refused_one_posted(
    browser: Browser, site: Site
) -> None:
    """A submitter's pages carry no action button and no link to operator pages; an action
    posted anyway with the session's own CSRF token is refused (403) and changes nothing."""
    held = site.submit(title=f"Drop old index ({HOLD_PATTERN})", task_type=DONE_TYPE, tenant="acme")
    page = login(browser, site, site.submitter)
    try:
        for path in ("/", "/tasks", "/approvals", "/paused", f"/tasks/{held['id']}"):
            page.goto(site.url + path)
            for name in ("Approve", "Reject", "Requeue", "Archive", "Cancel task", "Pause"):
                expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
        expect(page.get_by_role("link", name="Dead letters")).to_have_count(0)
        answer = page.goto(site.url + "/dead-letters")
        assert answer is not None and answer.status == 403
        page.goto(f"{site.url}/tasks/{held['id']}")
        csrf = page.locator("input[name=csrf]").first.get_attribute("value")
        posted = page.request.post(
            f"{site.url}/approvals/{held['id']}",
            form={"csrf": csrf or "", "decision": "approve", "reason": "let me"},
            max_redirects=0,
        )
        assert posted.status == 403
        assert site.task(held["id"])["state"] == "blocked"
        screenshot(site, page, "submitter-task")
    finally:
        page.context.close()


def test_a_form_post_without_the_csrf_token_is_refused(admin_page: Page, site: Site) -> None:
    """With a working session, a post without the CSRF token, or with another one, is refused
    (403) and changes nothing; the same post with the page's token goes through."""
    held = site.submit(title=f"Grant access ({HOLD_PATTERN})", task_type=DONE_TYPE)
    page = admin_page
    page.goto(f"{site.url}/tasks/{held['id']}")
    url = f"{site.url}/approvals/{held['id']}"
    decision = {"decision": "reject", "reason": "forged"}
    for forged in ({}, {"csrf": "0" * 64}):
        answer = page.request.post(url, form={**decision, **forged}, max_redirects=0)
        assert answer.status == 403, answer.status
        assert "CSRF" in answer.text()
    assert site.task(held["id"])["state"] == "blocked"
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    answer = page.request.post(url, form={**decision, "csrf": csrf}, max_redirects=0)
    assert answer.status == 303
    assert site.task(held["id"])["state"] == "cancelled"
