"""The web UI's pages in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, which ``.ci/run`` installs) driven by Selenium. The queries page and a
query's page are loaded while a query runs and after one ran: the stage DAG and the timeline
must be drawn, the page must log no script error, and screenshots are saved as artifacts."""

from __future__ import annotations

import os

import pytest

from tests.conftest import engine_over, wait_until
from tests.test_cancellation import BOUND, run_endless
from tests.test_web_ui import JOIN, get_json

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PAGE_WAIT = 60.0  # seconds for a page to draw, on a loaded machine

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    pytest.skip(f"no Chromium at {CHROMIUM} with its driver at {CHROMEDRIVER}: apt-get install chromium chromium-driver "
                "(.ci/run does)", allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402 - only once selenium is known to be there


@pytest.fixture(scope="module")
def ui_engine(data_paths):
    con = engine_over(data_paths, broadcast_threshold=0, ui=True)
    yield con
    con.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1600"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(PAGE_WAIT)
    yield driver
    driver.quit()


def no_script_errors(driver) -> None:
    severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def screenshot(driver, tmp_path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path))
    print(f"screenshot: {path}")


def drawn(driver, stages: int) -> bool:
    """The query page has drawn its DAG with every stage, and its timeline with bars."""
    boxes = driver.find_elements(By.CSS_SELECTOR, "#dag svg g.stage")
    bars = driver.find_element(By.ID, "timeline").get_attribute("data-bars")
    return len(boxes) == stages and bars is not None and int(bars) > 0


def test_pages_draw_a_running_and_a_finished_query(ui_engine, browser, tmp_path) -> None:
    cur = ui_engine.cursor()
    thread, errors = run_endless(cur)
    try:
        running = f"/api/queries/{cur.query_id}"
        wait_until(lambda: any(s["outcome"] == "running" for s in get_json(ui_engine, running)["spans"]), BOUND, "its tasks to run")
        # The printed URL logs the browser in and lands on the queries page.
        browser.get(ui_engine.ui_url)
        assert "token=" not in browser.current_url
        wait_until(lambda: cur.query_id in browser.find_element(By.ID, "queries").text, PAGE_WAIT, "the running query to be listed")
        row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#queries tbody tr") if cur.query_id in r.text)
        assert "running" in row.text
        screenshot(browser, tmp_path, "queries-running")
        row.find_element(By.TAG_NAME, "a").click()
        stages = len(get_json(ui_engine, running)["stages"])
        wait_until(lambda: drawn(browser, stages), PAGE_WAIT, "the running query's DAG and timeline")
        assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-status") == "running"
        screenshot(browser, tmp_path, "query-running")
        no_script_errors(browser)
    finally:
        if cur.query_id is not None:
            ui_engine.cancel(cur.query_id)
        thread.join(BOUND)
    cancelled = cur.query_id
    # The page follows the query to its end.
    wait_until(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-status") == "failed", PAGE_WAIT,
               "the page to show the query cancelled")

    cur = ui_engine.execute(JOIN)
    cur.fetchall()
    query = get_json(ui_engine, f"/api/queries/{cur.query_id}")
    assert query["shuffles"]
    browser.get(ui_engine.ui_url.split("?")[0] + f"queries/{cur.query_id}")
    wait_until(lambda: drawn(browser, len(query["stages"])), PAGE_WAIT, "the finished query's DAG and timeline")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#dag svg g.edge")) == len(query["edges"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#shuffles .shuffle canvas")) == len(query["shuffles"])
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-status") == "finished"
    screenshot(browser, tmp_path, "query-finished")
    no_script_errors(browser)

    browser.get(ui_engine.ui_url.split("?")[0])
    wait_until(lambda: cur.query_id in browser.find_element(By.ID, "queries").text, PAGE_WAIT, "the finished query to be listed")
    rows = {r.find_element(By.TAG_NAME, "a").text: r.text for r in browser.find_elements(By.CSS_SELECTOR, "#queries tbody tr")}
    assert "finished" in rows[cur.query_id] and "cancelled" in rows[cancelled]
    screenshot(browser, tmp_path, "queries-after")
    no_script_errors(browser)

    browser.get(ui_engine.ui_url.split("?")[0] + "workers")
    wait_until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#workers tbody tr")) == 2, PAGE_WAIT, "both workers to be listed")
    screenshot(browser, tmp_path, "workers")
    no_script_errors(browser)
