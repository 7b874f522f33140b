"""The dashboard in a real browser: Debian's chromium, headless, driven by Selenium through
chromium-driver (nothing is downloaded). Each page is loaded as a person would, what they
see is asserted, the console must hold no error (a CSP violation is one), and each page's
screenshot is written under the test's temporary directory."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Env

from serve.fleet import SCRIPT
from serve.test_serve_command import serving

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)),
    reason="Debian's chromium and chromium-driver are not installed (.ci/run installs them)")

# Page, what a person must see on it, the chart elements it draws (CSS selector, at least).
PAGES = [
    ("fleet", "/", ["dead-job", "stale-job", SCRIPT, "idle jobs are not listed", "overdue"],
     ("table.jobs tbody tr", 9)),
    ("job", "/job?name=nightly-backup", ["nightly-backup", "next slots", "p95", "Runs",
                                         "hosts of nightly-backup: 2 hosts fire it", "silent"],
     ("svg.durations rect.run", 100)),
    ("hostile", "/job?" + "name=%3Cscript%3Ealert(1)%3C%2Fscript%3E", [SCRIPT, "failed"],
     ("svg.durations rect.run", 1)),
    ("timeline", "/timeline?range=7d", ["Timeline", "nightly-backup"],
     ("svg.timeline rect.run", 10)),
    ("calendar", "/calendar?job=nightly-backup&days=90", ["Calendar", "nightly-backup"],
     ("svg.calendar rect.day", 90)),
    ("audit", "/audit", ["Audit log", "<i>maintenance</i>", "pause"], ("table.audit tr", 2)),
    ("hosts", "/hosts", ["Hosts", "<b>gone</b>\\u202e", "silent", "older", "web-1", "web-2",
                         "pglock 0.0.9 on 1"], ("table.hosts tbody tr", 4)),
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never download
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--window-size=1280,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.slow
def test_each_page_shows_what_a_person_looks_for(fleet: Env, browser: object,
                                                   tmp_path: Path) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    driver: object = browser
    with serving(fleet) as (url, _, _):
        for name, path, seen, (selector, least) in PAGES:
            driver.get(url + path)  # type: ignore[attr-defined]
            text = driver.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
            for words in seen:
                assert words in text, (name, words)
            drawn = driver.find_elements(By.CSS_SELECTOR, selector)  # type: ignore[attr-defined]
            assert len(drawn) >= least, (name, selector, len(drawn))
            with pytest.raises(NoAlertPresentException):
                driver.switch_to.alert  # type: ignore[attr-defined]  # noqa: B018
            driver.save_screenshot(str(tmp_path / f"{name}.png"))  # type: ignore[attr-defined]
            errors = [entry for entry in driver.get_log("browser")  # type: ignore[attr-defined]
                      if entry["level"] == "SEVERE"]
            assert errors == [], (name, errors)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
        f"{name}.png" for name, *_ in PAGES)


@pytest.mark.slow
def test_calendar_cells_are_of_one_size_with_the_date_on_hover(
        fleet: Env, browser: object, tmp_path: Path) -> None:
    """As a contribution graph: 30 days or 366, a cell is drawn the same size on the
    screen (before, the drawing scaled to the page: 30 days filled it, with 60-pixel day
    names), and the date is in each cell's title (the browser's hover)."""
    from selenium.webdriver.common.by import By

    from pglock.serve.charts import CELL

    driver: object = browser
    sizes = {}
    with serving(fleet) as (url, _, _):
        for days in (30, 90, 366):
            driver.get(f"{url}/calendar?job=nightly-backup&days={days}")  # type: ignore[attr-defined]
            cells = driver.find_elements(By.CSS_SELECTOR, "svg.calendar rect.day")  # type: ignore[attr-defined]
            assert len(cells) == days
            sizes[days] = {(round(c.rect["width"]), round(c.rect["height"])) for c in cells}
            label = driver.find_element(By.CSS_SELECTOR, "svg.calendar text.tick")  # type: ignore[attr-defined]
            assert label.rect["height"] < 2 * CELL, label.rect
            title = cells[-1].find_element(By.TAG_NAME, "title").get_attribute("textContent")
            assert title[4:14] == fleet.query("SELECT to_char(now() AT TIME ZONE 'UTC', "
                                              "'YYYY-MM-DD')")[0][0], title
            driver.save_screenshot(str(tmp_path / f"calendar-{days}.png"))  # type: ignore[attr-defined]
    assert sizes == {days: {(CELL, CELL)} for days in (30, 90, 366)}, sizes
