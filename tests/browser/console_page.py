"""Drives the operator console (/console/) in headless Chromium as an operator would.

Usage: python3 console_page.py BASE_URL ADMIN_TOKEN CUSTOMER_TOKEN ORDER_WITH_DEAD_LETTER
       ORDER_WAITING_FOR_OPERATOR SCREENSHOT_DIR NUMBER_OF_THE_WAITING_ORDER

A customer token is refused with a clear message; the admin token signs in; the overview
shows the dead letter (an unroutable event, now routable); its payload is previewed; it is
dry-run then redriven and its order's story shows it PUBLISHED; the orders list finds the order
waiting for an operator by its number; its page shows its notification, which is reprocessed
there, and the order is COMPLETED; an unknown page says so. A screenshot of each page goes to SCREENSHOT_DIR. Exits 0 when every check holds;
otherwise prints what failed and exits 1.
"""

import os
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait


def main() -> int:
    base, admin, customer, dead_order, manual_order, shots, manual_number = sys.argv[1:8]
    os.makedirs(shots, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    wait = WebDriverWait(driver, 20)
    text = lambda: driver.find_element(By.TAG_NAME, "body").text

    def sign_in(token):
        box = wait.until(ec.visibility_of_element_located((By.ID, "token")))
        box.clear()
        box.send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()

    def answer_prompt(reason):
        box = wait.until(ec.visibility_of_element_located((By.ID, "reason")))
        box.send_keys(reason)
        driver.find_element(By.ID, "reason-ok").click()

    try:
        driver.get(f"{base}/console/")
        sign_in(customer)
        wait.until(ec.text_to_be_present_in_element((By.ID, "sign-in-error"), "no admin role"))
        driver.save_screenshot(f"{shots}/sign-in-refused.png")

        sign_in(admin)
        wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#overview .cards")))
        wait.until(lambda d: "Dead letters\n1" in d.find_element(By.ID, "overview").text)
        driver.save_screenshot(f"{shots}/overview.png")

        driver.find_element(By.LINK_TEXT, "Dead letters").click()
        wait.until(ec.presence_of_element_located((By.XPATH, "//button[starts-with(., 'Republish')]")))
        driver.find_element(By.XPATH, "//details/summary[.='show']").click()
        if "order.archived" not in text() or '"orderId"' not in text():
            raise AssertionError("the dead letter's type and payload are not shown")
        driver.find_element(By.ID, "dl-dry-run").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "dl-would-move"), "Would move 1"))
        driver.save_screenshot(f"{shots}/dead-letters.png")
        driver.find_element(By.ID, "dl-confirm").click()
        answer_prompt("console test: broker fixed")
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "Redriven: 1"))

        # The order's story shows the event published once the relay has sent it again.
        for _ in range(40):
            driver.get(f"{base}/console/#order/{dead_order}")
            driver.refresh()  # a new load: the same hash would not fire hashchange
            wait.until(ec.text_to_be_present_in_element((By.ID, "o-summary"), "COMPLETED"))
            events = driver.find_element(By.XPATH, "//h3[.='Events']/following-sibling::table[1]").text
            if "DEAD_LETTER" not in events and "READY" not in events and "PUBLISHED" in events:
                break
            time.sleep(0.25)
        else:
            raise AssertionError(f"the redriven event was not published: {events}")
        source = driver.find_element(By.ID, "o-source").text
        if "native API" not in source:
            raise AssertionError(f"the order page does not say how the order came in: {source}")
        driver.save_screenshot(f"{shots}/order.png")

        driver.get(f"{base}/console/#notifications")
        wait.until(ec.element_to_be_clickable((By.XPATH, "//button[.='Reprocess']")))
        driver.save_screenshot(f"{shots}/notifications.png")

        # The orders list: every order, newest first; found by the number a customer gives.
        driver.get(f"{base}/console/#orders")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#os-body table")))
        driver.find_element(By.CSS_SELECTOR, "#os-filter input[name=number]").send_keys(manual_number)
        driver.find_element(By.CSS_SELECTOR, "#os-filter button").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#os-body tbody tr")) == 1
                   and f"#{manual_number}" in d.find_element(By.ID, "os-body").text)
        driver.save_screenshot(f"{shots}/orders.png")
        driver.find_element(By.LINK_TEXT, f"#{manual_number}").click()
        # Its page shows the notification waiting for an operator, and repairs it there.
        wait.until(ec.text_to_be_present_in_element((By.ID, "o-notification"), "MANUAL_INTERVENTION_REQUIRED"))
        driver.find_element(By.ID, "o-reprocess").click()
        answer_prompt("console test: customer asked again")
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), f"order {manual_order} is COMPLETED"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "o-notification"), "SENT"))

        # An order by its number in the look-up, and a page that does not exist.
        driver.get(f"{base}/console/#order/{manual_number}")
        driver.refresh()
        wait.until(ec.text_to_be_present_in_element((By.ID, "o-summary"), f"#{manual_number}"))
        driver.get(f"{base}/console/#nowhere")
        driver.refresh()
        wait.until(ec.text_to_be_present_in_element((By.ID, "unknown"), "No such page"))

        driver.get(f"{base}/console/#payments")
        wait.until(ec.text_to_be_present_in_element((By.ID, "p-body"), "Awaiting confirmation"))
        driver.save_screenshot(f"{shots}/payments.png")
        print("ok: sign-in refused a customer, dead letter redriven and published, notification reprocessed")
        return 0
    except Exception as e:  # noqa: BLE001 - report whatever went wrong, with the page
        print(f"failed: {type(e).__name__}: {e}\n--- page ---\n{text()}")
        driver.save_screenshot(f"{shots}/failure.png")
        return 1
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
