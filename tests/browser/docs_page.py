"""Loads /docs in headless Chromium and uses it as a user would.

Usage: python3 docs_page.py BASE_URL TOKEN EXPECTED_OPERATIONS

Checks that Swagger UI renders every operation of /openapi.json, customer routes first,
Markdown rendered (no raw backticks), then authorizes with the bearer token and makes one
call from the page ("Try it out" → "Execute" on GET /api/orders) that answers 200.
Needs Debian's chromium and chromium-driver and the selenium package (.ci/run installs them).
Exits 0 when every check holds; otherwise prints what failed and exits 1.
"""

import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait


def main() -> int:
    base, token, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,2000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        wait = WebDriverWait(driver, 20)
        driver.get(f"{base}/docs")
        wait.until(ec.presence_of_all_elements_located((By.CSS_SELECTOR, ".opblock")))
        operations = driver.find_elements(By.CSS_SELECTOR, ".opblock")
        tags = [t.get_attribute("data-tag") for t in driver.find_elements(By.CSS_SELECTOR, ".opblock-tag")]
        problems = []
        if len(operations) != expected:
            problems.append(f"{len(operations)} operations rendered, {expected} in /openapi.json")
        if not tags or tags[0] != "orders":
            problems.append(f"customer routes are not first: tags in order {tags}")
        shown = driver.find_element(By.CSS_SELECTOR, ".information-container").text + "".join(
            e.text for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-description"))
        if "`" in shown:
            problems.append("Markdown shown raw (backticks in a rendered summary or description)")
        if driver.find_elements(By.CSS_SELECTOR, ".errors-wrapper"):
            problems.append("Swagger UI reports errors in the document")

        driver.find_element(By.CSS_SELECTOR, "button.authorize").click()
        field = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ".auth-container input")))
        field.send_keys(token)
        driver.find_element(By.CSS_SELECTOR, ".auth-btn-wrapper button.authorize").click()
        driver.find_element(By.CSS_SELECTOR, "button.btn-done").click()

        block = driver.find_element(By.ID, "operations-orders-list_orders")
        block.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
        wait.until(lambda d: block.find_elements(By.CSS_SELECTOR, "button.execute"))
        block.find_element(By.CSS_SELECTOR, "button.execute").click()
        status = wait.until(lambda d: block.find_element(
            By.CSS_SELECTOR, ".live-responses-table .response .response-col_status").text.strip())
        if status != "200":
            body = block.find_element(By.CSS_SELECTOR, ".live-responses-table").text
            problems.append(f"GET /api/orders from the page answered {status}: {body}")
        if problems:
            print("\n".join(problems))
            return 1
        print(f"ok: {len(operations)} operations, tags {tags}, GET /api/orders from the page: {status}")
        return 0
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
