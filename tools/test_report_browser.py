"""The report in a real browser: Debian's chromium, headless, driven by playwright.

At 1400 × 900 (a laptop's first screen) the headline block must be fully visible and every
image must load. The browser is the system's (`make setup` installs it with apt as root);
`playwright install` is never run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SCREEN = {"width": 1400, "height": 900}


def test_report_in_a_browser_images_load_and_headline_fits_the_first_screen(quick_report):
    if not CHROMIUM.is_file():
        pytest.skip(f"Debian's chromium is not installed ({CHROMIUM}; `make setup` as root)")
    from playwright.sync_api import sync_playwright

    out, _ = quick_report  # a failed section still renders: the page is checked either way
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=SCREEN)
            page.goto((out / "index.html").as_uri(), wait_until="load")
            images = page.evaluate(
                "() => Array.from(document.images, i => [i.getAttribute('src'), i.complete,"
                " i.naturalWidth])"
            )
            box = page.evaluate(
                "() => { const r = document.getElementById('headline').getBoundingClientRect();"
                " return [r.top, r.bottom, r.right, document.documentElement.scrollWidth]; }"
            )
        finally:
            browser.close()
    assert len(images) >= 4, images
    broken = [src for src, complete, width in images if not (complete and width > 0)]
    assert not broken, f"images that did not load: {broken}"
    top, bottom, right, page_width = box
    assert 0 <= top < bottom <= SCREEN["height"], f"headline block spans {top}-{bottom} px"
    assert right <= SCREEN["width"] and page_width <= SCREEN["width"], "the page scrolls sideways"
