"""The live view of `infer-stream serve` in a real headless Chromium (Debian's,
driven by Playwright), for tests/serve_ui.rs, which starts the server, the
RTSP test camera and two streams first:

    PY tests/support/ui_browser.py BASE_URL VIEWER_TOKEN OPERATOR_TOKEN CAMERA_PID CAMERA_URI SCREENSHOT

`door` is the RTSP camera (a bouncing ball), `plates` a clip through text
detection. Checks, in order: sign-in (a bad token refused, a viewer's token
accepted, `#token=` for an operator); the grid shows both streams; the live
picture changes (two screenshots differ) and shows the drawn boxes (the text
boxes' green); a viewer gets no add form and no remove button; an operator
adds a camera from the form (an error from the API shown inline first), it
shows pictures, removing it takes it off; the camera killed, `door` shows as
lost within 2 s and its `lost` event in the feed; the events feed and
counts show the plates crossing the line `gate`; no console errors but the refusals the steps ask for.
Prints `ok` and exits 0, or raises.

    PY tests/support/ui_browser.py proxy PAGE_URL VIEWER_TOKEN

checks the page behind a TLS reverse proxy's path prefix (`behind_proxy`).
"""

import os
import signal
import sys
import time

from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def until(what, check, timeout=30.0):
    """Poll `check` (Python, not a script in the page: its CSP allows no eval) until true."""
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def frames(page, stream):
    v = page.get_attribute(f'.card[data-stream="{stream}"] img', "data-frames", timeout=30000)
    return int(v or 0)


def main():
    base, viewer, operator, camera_pid, camera_uri, shot = sys.argv[1:7]
    page_url = base.rstrip("/") + "/ui/"
    errors = []
    # Refusals a step asks for are logged by Chromium as failed loads; anything else is an error.
    expected = ("status of 401", "status of 409")

    def watch(page):
        page.on("console", lambda m: m.type == "error" and not any(e in m.text for e in expected) and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        # Sign-in: the form, a bad token, then the viewer's.
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        page = ctx.new_page()
        watch(page)
        page.goto(page_url)
        page.wait_for_selector("#signin-form", state="visible")
        assert page.is_hidden("#app"), "the app shows before sign-in"
        page.fill("#token", "not-a-valid-token-at-all")
        page.click("#signin-form button")
        until("the bad token refused", lambda: "not valid" in page.text_content("#signin-error"), 10)
        assert page.is_hidden("#app")
        page.fill("#token", viewer)
        page.click("#signin-form button")
        page.wait_for_selector("#app", state="visible")
        assert "viewer" in page.text_content("#who")
        assert page.evaluate("sessionStorage.getItem('infer-stream-token')") == viewer
        # The grid: both streams, running.
        for s in ("door", "plates"):
            page.wait_for_selector(f'.card[data-stream="{s}"][data-state="running"]', timeout=30000)
        # A viewer: no add form, no remove button.
        assert page.is_hidden("#add"), "a viewer is offered the add form"
        assert page.query_selector(".card .remove") is None, "a viewer is offered a remove button"
        # Live pictures: they come, they change, the boxes are drawn.
        until("pictures of door", lambda: frames(page, "door") >= 2)
        door = page.locator(".card[data-stream=door] img")
        first = door.screenshot()
        time.sleep(1.0)
        second = door.screenshot()
        assert first != second, "the live picture did not change in 1 s"
        until("pictures of plates", lambda: frames(page, "plates") >= 2)
        green = page.evaluate(
            """async () => {
                const img = document.querySelector('.card[data-stream=plates] img');
                const c = document.createElement('canvas');
                c.width = img.naturalWidth; c.height = img.naturalHeight;
                const g = c.getContext('2d');
                g.drawImage(img, 0, 0);
                const d = g.getImageData(0, 0, c.width, c.height).data;
                let n = 0;
                for (let i = 0; i < d.length; i += 4) {
                  const [r, g, b] = [d[i], d[i + 1], d[i + 2]];
                  // text boxes' green, or the tracks' orange (255, 140, 0)
                  if ((g > 200 && r < 90 && b < 90) || (r > 200 && g > 100 && g < 180 && b < 70)) n++;
                }
                return n;
            }"""
        )
        assert green > 500, f"no drawn boxes on the plates' picture ({green} pixels of their colours)"
        # The events feed and the counts: the plates cross the line `gate`.
        page.wait_for_selector('#events li[data-event="crossed"]', timeout=30000)
        assert "line=gate" in page.text_content('#events li[data-event="crossed"]')
        until("the line's count", lambda: "line gate" in page.text_content("#counts"))
        page.wait_for_timeout(1500)
        page.screenshot(path=shot)
        ctx.close()

        # An operator, signed in through the fragment.
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        page = ctx.new_page()
        watch(page)
        page.goto(page_url + "#token=" + operator)
        page.wait_for_selector("#app", state="visible")
        assert "#token" not in page.url, "the token stays in the address"
        assert "operator" in page.text_content("#who")
        page.wait_for_selector("#add", state="visible")
        # An error from the API, shown inline: the id exists.
        page.select_option("#add-source", "cams")
        page.fill("#add-id", "door")
        page.fill('#add-fields input[data-key="uri"]', camera_uri)
        page.click("#add-form button[type=submit]")
        until("the API's error shown", lambda: "exists" in page.text_content("#add-error"), 10)
        # Added from the form: it appears and shows pictures; removed: it goes.
        page.fill("#add-id", "cam2")
        page.fill('#add-fields input[data-key="uri"]', camera_uri)
        page.click("#add-form button[type=submit]")
        page.wait_for_selector('.card[data-stream="cam2"]', timeout=10000)
        until("pictures of cam2", lambda: frames(page, "cam2") >= 2)
        page.click('.card[data-stream="cam2"] .remove')
        page.wait_for_selector('.card[data-stream="cam2"]', state="detached", timeout=15000)
        # The camera goes away: `door` shows as lost (or already reconnecting) within 2 s.
        page.wait_for_selector('.card[data-stream="door"][data-state="running"]')
        os.kill(int(camera_pid), signal.SIGKILL)
        page.wait_for_selector(
            '.card[data-stream="door"][data-state="lost"], .card[data-stream="door"][data-state="reconnecting"]', timeout=2000
        )
        # ... and its `lost` event is in the feed.
        page.wait_for_selector('#events li[data-event="lost"]', timeout=10000)
        assert "door" in page.text_content('#events li[data-event="lost"]')
        ctx.close()
        browser.close()
    assert not errors, f"console errors: {errors}"
    print("ok")


def behind_proxy():
    """`proxy PAGE_URL VIEWER_TOKEN`: the page behind a TLS reverse proxy's path
    prefix (PAGE_URL is `https://host/prefix/`): `/prefix/` leads to the page,
    the viewer signs in by the fragment, the grid, the live picture (it
    changes), the events feed and the counts all work through the proxy."""
    url, viewer = sys.argv[2:4]
    errors = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        ctx = browser.new_context(viewport={"width": 1200, "height": 800}, ignore_https_errors=True)
        page = ctx.new_page()
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url + "#token=" + viewer)
        page.wait_for_selector("#app", state="visible")
        assert page.url.startswith(url + "ui/"), f"{url} did not lead to the page under the prefix: {page.url}"
        assert "#token" not in page.url, "the token stays in the address"
        assert "viewer" in page.text_content("#who")
        page.wait_for_selector('.card[data-stream="plates"][data-state="running"]', timeout=30000)
        until("pictures of plates", lambda: frames(page, "plates") >= 2)
        img = page.locator(".card[data-stream=plates] img")
        first = img.screenshot()
        time.sleep(1.0)
        assert first != img.screenshot(), "the live picture did not change in 1 s"
        page.wait_for_selector('#events li[data-event="crossed"]', timeout=30000)
        until("the line's count", lambda: "line gate" in page.text_content("#counts"))
        ctx.close()
        browser.close()
    assert not errors, f"console errors: {errors}"
    print("ok")


if __name__ == "__main__":
    if sys.argv[1] == "proxy":
        behind_proxy()
    else:
        main()
