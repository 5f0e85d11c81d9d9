"""Drives the console's Settlements page (/console/#settlements) in headless Chromium.

Usage: python3 console_settlements.py BASE_URL ADMIN_TOKEN RETRY_SETTLEMENT MARK_SETTLEMENT SCREENSHOT_DIR

Both settlements wait for an operator: the overview counts them; the page lists them; the
first is retried (its receiver is back) and the second marked settled, each with a reason,
and the page says each order moved on. Exits 0 when every check holds; otherwise prints what
failed and exits 1.
"""

import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait


def main() -> int:
    base, admin, retry_id, mark_id, shots = sys.argv[1:6]
    os.makedirs(shots, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    wait = WebDriverWait(driver, 20)

    def answer_prompt(reason):
        box = wait.until(ec.visibility_of_element_located((By.ID, "reason")))
        box.send_keys(reason)
        driver.find_element(By.ID, "reason-ok").click()

    try:
        driver.get(f"{base}/console/")
        box = wait.until(ec.visibility_of_element_located((By.ID, "token")))
        box.send_keys(admin)
        driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
        wait.until(lambda d: "Settlements needing an operator\n2" in d.find_element(By.ID, "overview").text)

        driver.find_element(By.LINK_TEXT, "Settlements").click()
        wait.until(ec.presence_of_element_located((By.XPATH, f"//button[.='Retry {retry_id}']")))
        driver.save_screenshot(f"{shots}/settlements.png")
        driver.find_element(By.XPATH, f"//button[.='Retry {retry_id}']").click()
        answer_prompt("console test: accounting is back")
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), f"Settlement {retry_id}: order"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "settlement SUCCEEDED"))

        wait.until(ec.presence_of_element_located((By.XPATH, f"//button[.='Mark settled {mark_id}']")))
        driver.find_element(By.XPATH, f"//button[.='Mark settled {mark_id}']").click()
        answer_prompt("console test: booked by hand")
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), f"Settlement {mark_id}: order"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "is COMPLETED"))
        wait.until(lambda d: f"Retry {mark_id}" not in d.find_element(By.ID, "s-body").text)
        print("ok: retried and marked settled from the console")
        return 0
    except Exception as exc:  # noqa: BLE001 - report what failed, with the page
        print(f"failed: {exc!r}\n{driver.find_element(By.TAG_NAME, 'body').text}")
        driver.save_screenshot(f"{shots}/settlements-failed.png")
        return 1
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
