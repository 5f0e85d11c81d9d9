// The operator console: a thin page over the admin API (no backend of its own). The token
// lives in sessionStorage (this tab only), never in the URL.
"use strict";

// How an order reached us (its `source`): which API or dialect it came through (docs/dialects.md).
const SOURCES = {
  API: "the native API (POST /api/orders)",
  MEETING: "the meeting service (a registration on the broker)",
  COMMERCE: "the commerce dialect (the commerce backend's POST /api/orders, then orchestrate)",
  MOMO: "the momo dialect (the meetup platform's POST /payments/test/keyin: a card keyed in, charged by the order's first run)",
};
const TOKEN = "console-token";
// "operator" (an admin token) or "member" (a merchant's member: its merchants only).
const ROLE = "console-role";
const role = () => sessionStorage.getItem(ROLE) || "operator";
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}

function table(headers, rows) {
  if (rows.length === 0) return el("p", {}, "None.");
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

function say(text) { $("status").textContent = text; }

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(TOKEN)}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const error = new Error(json && json.detail ? `${response.status} ${json.code}: ${json.detail}` : `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return json;
}

// Asks for the reason of an action; resolves to the reason ("" for none) or null (cancelled).
function reasonFor(what) {
  const dialog = $("reason-dialog");
  $("reason-what").textContent = `Before ${what}:`;
  $("reason").value = "";
  // A close without a value (Escape) must not read an earlier confirm's "ok": browsers need
  // not reset it.
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      resolve(dialog.returnValue === "ok" ? $("reason").value.trim() : null);
    }, { once: true });
    dialog.showModal();
    $("reason").focus();
  });
}

function pretty(json) {
  try { return JSON.stringify(JSON.parse(json), null, 2); } catch { return json; }
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "none waiting";
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

// ---- sign-in ---------------------------------------------------------------------------

async function signIn(token) {
  sessionStorage.setItem(TOKEN, token.trim());
  sessionStorage.setItem(ROLE, "operator");
  try {
    await api("GET", "/api/admin/outbox/stats");
  } catch (e) {
    // Not an operator: a merchant's member sees its merchants (and nothing else).
    const merchants = e.status === 403 ? await api("GET", "/api/merchants").catch(() => []) : [];
    if (merchants.length > 0) {
      sessionStorage.setItem(ROLE, "member");
    } else {
      sessionStorage.removeItem(TOKEN);
      sessionStorage.removeItem(ROLE);
      $("sign-in-error").textContent = e.status === 403
        ? "This token has no admin role: the console is for operators (a customer token cannot use it)."
        : e.status === 401 ? `The token was refused (${e.message}).` : `Cannot reach the service (${e.message}).`;
      return false;
    }
  }
  $("sign-in-error").textContent = "";
  $("token").value = "";
  return true;
}

$("sign-in-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  if (await signIn($("token").value)) {
    const home = role() === "member" ? "#merchants" : "#overview";
    location.hash = location.hash && location.hash !== "#sign-in" && role() === "operator" ? location.hash : home;
    route();
  }
});

$("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN);
  sessionStorage.removeItem(ROLE);
  location.hash = "";
  route();
});

// ---- overview --------------------------------------------------------------------------

function card(label, value, attention) {
  return el("div", { class: attention ? "card attention" : "card" }, label, el("strong", {}, String(value)));
}

// A list's length as a count: a list that came back full says so ("100+"), never a
// silently capped number.
function count(items, limit) {
  return items.length >= limit ? `${limit}+` : String(items.length);
}

async function overview() {
  const [stats, unconfirmed, stalled, manual, failed, exhausted, waitingSettlements] = await Promise.all([
    api("GET", "/api/admin/outbox/stats"),
    api("GET", "/api/admin/payments/unconfirmed"),
    api("GET", "/api/admin/orders/stalled"),
    api("GET", "/api/admin/notification-events?status=MANUAL_INTERVENTION_REQUIRED&limit=100"),
    api("GET", "/api/admin/notification-events?status=FAILED&limit=100"),
    api("GET", "/api/admin/payments/compensations-exhausted"),
    api("GET", "/api/admin/settlements?status=AWAITING_OPERATOR&limit=100"),
  ]);
  const dead = stats.byStatus.DEAD_LETTER || 0;
  const waiting = stats.oldestReadyAgeSeconds;
  $("overview-body").replaceChildren(
    el("div", { class: "cards" },
      card("Oldest event waiting to be published", age(waiting), waiting > 300),
      card("Dead letters", dead, dead > 0),
      card("Aggregates blocked behind a dead letter", stats.blockedAggregates, stats.blockedAggregates > 0),
      card("Settlements needing an operator", count(waitingSettlements.items, 100), waitingSettlements.items.length > 0),
      card("Notifications needing an operator", count(manual.items, 100), manual.items.length > 0),
      card("Notifications failed", count(failed.items, 100), failed.items.length > 0),
      card("Payments awaiting confirmation (past reconciliation)", count(unconfirmed, 200), unconfirmed.length > 0),
      card("Stalled sagas", count(stalled, 100), stalled.length > 0),
      card("Compensations exhausted", count(exhausted, 1000), exhausted.length > 0)),
    el("h3", {}, "Outbox events by state"),
    table(["state", "events"], Object.entries(stats.byStatus)),
    el("h3", {}, "Dead letters by event type"),
    table(["event type", "dead letters"], Object.entries(stats.deadLettersByType)));
}

// ---- dead letters ----------------------------------------------------------------------

function filters() {
  const form = new FormData($("dl-filter"));
  const pick = (k) => (form.get(k) || "").trim() || undefined;
  return { eventType: pick("eventType"), failureCode: pick("failureCode"), olderThan: pick("olderThan") };
}

async function settle(row, discard) {
  const reason = await reasonFor(`${discard ? "discarding" : "republishing"} event ${row.id}`);
  if (reason === null) return;
  const after = await api("POST", `/api/admin/outbox/${row.id}/${discard ? "discard" : "republish"}`, { reason: reason || undefined });
  say(`Event ${row.id}: ${after.status}.`);
  await deadLetters();
}

async function deadLetters() {
  // Filtered by the server over every dead letter, as the redrive's dry run is.
  const query = new URLSearchParams({ status: "DEAD_LETTER", limit: "100" });
  for (const [k, v] of Object.entries(filters())) if (v !== undefined) query.set(k, v);
  const page = await api("GET", `/api/admin/outbox?${query}`);
  const rows = page.items;
  $("dl-body").replaceChildren(table(
    ["id", "event type", "aggregate", "failure", "retries", "dead-lettered at", "payload", "actions"],
    rows.map((r) => [
      String(r.id), r.eventType, `${r.aggregateType} ${r.aggregateId}`,
      el("span", {}, r.failureCode || "", el("br"), r.failureReason || ""),
      String(r.retryCount), r.deadLetteredAt || "",
      el("details", {}, el("summary", {}, "show"), el("pre", {}, pretty(r.payload))),
      el("span", {},
        el("button", { type: "button", onclick: () => settle(r, false).catch((e) => say(e.message)) }, `Republish ${r.id}`), " ",
        el("button", { type: "button", onclick: () => settle(r, true).catch((e) => say(e.message)) }, `Discard ${r.id}`)),
    ])));
}

$("dl-filter").addEventListener("submit", (event) => {
  event.preventDefault();
  deadLetters().catch((e) => say(e.message));
});

$("dl-dry-run").addEventListener("click", async () => {
  try {
    const request = { ...filters(), limit: 100, dryRun: true };
    const dry = await api("POST", "/api/admin/outbox/redrive", request);
    const confirm = el("button", { type: "button", id: "dl-confirm" }, `Redrive these ${dry.matched}`);
    confirm.addEventListener("click", async () => {
      const reason = await reasonFor(`redriving ${dry.matched} dead letters`);
      if (reason === null) return;
      const done = await api("POST", "/api/admin/outbox/redrive", { ...request, dryRun: false, reason: reason || undefined });
      say(`Redriven: ${done.redriven} (ids ${done.ids.join(", ")}).`);
      $("dl-redrive").replaceChildren();
      await deadLetters();
    });
    $("dl-redrive").replaceChildren(
      el("p", { id: "dl-would-move" }, `Would move ${dry.matched}: ids ${dry.ids.join(", ") || "none"}.`),
      dry.matched > 0 ? confirm : "");
  } catch (e) { say(e.message); }
});

// ---- settlements -----------------------------------------------------------------------

// A waiting settlement's two repairs, asked for a reason; `after` redraws the page it is on.
async function settleBy(s, verb, after) {
  const reason = await reasonFor(`${verb === "retry" ? "retrying" : "marking settled"} settlement ${s.id}`);
  if (reason === null) return;
  if (verb === "mark-settled" && !reason) { say("Marking settled needs a reason."); return; }
  const order = await api("POST", `/api/admin/settlements/${s.id}/${verb}`, { reason: reason || undefined });
  say(`Settlement ${s.id}: order #${order.number} (${order.id}) is ${order.status}, settlement ${order.settlement ? order.settlement.status : "none"}.`);
  await after();
}

const WAITING = ["RETRY_SCHEDULED", "AWAITING_OPERATOR"];

function settlementActions(s, after) {
  if (!WAITING.includes(s.status)) return "";
  return el("span", {},
    el("button", { type: "button", onclick: () => settleBy(s, "retry", after).catch((e) => say(e.message)) }, `Retry ${s.id}`), " ",
    el("button", { type: "button", onclick: () => settleBy(s, "mark-settled", after).catch((e) => say(e.message)) }, `Mark settled ${s.id}`));
}

async function settlements() {
  const lists = await Promise.all(["AWAITING_OPERATOR", "RETRY_SCHEDULED"].map((s) =>
    api("GET", `/api/admin/settlements?status=${s}&limit=100`)));
  $("s-body").replaceChildren(...["Needing an operator", "Retry scheduled"].flatMap((title, i) => [
    el("h3", {}, title),
    table(["order", "settlement", "amount", "attempts", "next attempt", "last error", "actions"], lists[i].items.map((s) => [
      el("a", { href: `#order/${s.orderId}`, title: s.orderId }, `#${s.orderNumber}`), s.id, `${s.amount} ${s.currency}`,
      String(s.attempts), s.nextAttemptAt || "", s.lastError || "", settlementActions(s, settlements),
    ])),
  ]));
}

// ---- notifications ---------------------------------------------------------------------

async function act(n, verb) {
  const reason = await reasonFor(`${verb === "reprocess" ? "reprocessing" : "ignoring"} notification ${n.id}`);
  if (reason === null) return;
  const order = await api("POST", `/api/admin/notification-events/${n.id}/${verb}`, { reason: reason || undefined });
  say(`Notification ${n.id}: order ${order.id} is ${order.status}.`);
  await notifications();
}

async function notifications() {
  const lists = await Promise.all(["MANUAL_INTERVENTION_REQUIRED", "FAILED", "RETRY_SCHEDULED"].map((s) =>
    api("GET", `/api/admin/notification-events?status=${s}&limit=100`)));
  $("n-body").replaceChildren(...["Needing an operator", "Failed (attempts used up)", "Retry scheduled"].flatMap((title, i) => [
    el("h3", {}, title),
    table(["id", "order", "policy", "attempts", "last error", "actions"], lists[i].items.map((n) => [
      n.id, n.orderId, n.policy || "", String(n.attempts), n.lastError || "",
      el("span", {},
        el("button", { type: "button", onclick: () => act(n, "reprocess").catch((e) => say(e.message)) }, "Reprocess"), " ",
        el("button", { type: "button", onclick: () => act(n, "ignore").catch((e) => say(e.message)) }, "Ignore")),
    ])),
  ]));
}

$("n-retry-due").addEventListener("click", async () => {
  try {
    const r = await api("POST", "/api/admin/notification-events/retry-due");
    $("n-round").replaceChildren(el("p", {}, `Round: claimed ${r.claimed}, succeeded ${r.succeeded}, failed ${r.failed}, skipped ${r.skipped}.`));
    await notifications();
  } catch (e) { say(e.message); }
});

// ---- payments --------------------------------------------------------------------------

async function payments() {
  const [unconfirmed, stalled, exhausted] = await Promise.all([
    api("GET", "/api/admin/payments/unconfirmed"),
    api("GET", "/api/admin/orders/stalled"),
    api("GET", "/api/admin/payments/compensations-exhausted"),
  ]);
  $("p-body").replaceChildren(
    el("h3", {}, "Compensations exhausted"),
    el("p", {}, "The settlement failed and cancelling the payment failed on every retry: the customer was charged for a failed order. Once the provider answers again, run the order again (POST /api/orders/{id}/orchestrate) to cancel with the same idempotency key; if it keeps refusing, refund in the provider's console."),
    table(["order", "number", "status", "customer", "total"], exhausted.map((o) => [
      el("a", { href: `#order/${o.id}` }, o.id), String(o.number), o.status, o.customerId || "", `${o.totalAmount} ${o.currency}`])),
    el("h3", {}, "Awaiting confirmation"),
    el("p", {}, "The provider's answer to these charges is unknown and reconciliation has used its look-ups. Ask the provider by the payment request id (its idempotency key), then let a provider callback settle it. Never charge again by hand."),
    table(["order", "payment request id", "status", "amount", "look-ups"], unconfirmed.map((p) => [
      el("a", { href: `#order/${p.orderId}` }, p.orderId), p.payment.paymentRequestId, p.payment.status,
      String(p.payment.amount), String(p.reconcileAttempts)])),
    el("h3", {}, "Stalled sagas"),
    el("p", {}, "Orders that stopped half-way after every automatic resume. Read the order's story; once the cause is fixed, run it again (POST /api/orders/{id}/orchestrate)."),
    table(["order", "number", "status", "customer"], stalled.map((o) => [
      el("a", { href: `#order/${o.id}` }, o.id), String(o.number), o.status, o.customerId || ""])));
}

// ---- orders ------------------------------------------------------------------------------

// The list's filters as the API's query; `cursor` pages on.
function orderQuery(cursor) {
  const form = new FormData($("os-filter"));
  const query = new URLSearchParams({ limit: "50" });
  for (const k of ["status", "number", "customerId", "source"]) {
    const v = (form.get(k) || "").trim();
    if (v) query.set(k, v);
  }
  if (cursor) query.set("cursor", cursor);
  return query;
}

async function orders(cursor) {
  const page = await api("GET", `/api/orders?${orderQuery(cursor)}`);
  const next = page.nextCursor
    ? el("button", { type: "button", id: "os-next", onclick: () => orders(page.nextCursor).catch((e) => say(e.message)) }, "Older orders")
    : el("span");
  $("os-body").replaceChildren(
    table(["number", "status", "customer", "total", "came through", "created"], page.items.map((o) => [
      el("a", { href: `#order/${o.id}`, title: o.id }, `#${o.number}`), o.status + (o.failureStage ? ` (${o.failureStage})` : ""),
      o.customerId || "", `${o.totalAmount} ${o.currency}`, o.source, o.createdAt])),
    next);
}

$("os-filter").addEventListener("submit", (event) => {
  event.preventDefault();
  orders().catch((e) => say(e.message));
});

// ---- order look-up ---------------------------------------------------------------------

// The order's settlement as the operator needs it: its state, attempts, last error, and the
// repairs while it waits.
async function orderSettlement(detail) {
  if (!detail.settlement) return el("p", { id: "o-settlement" }, "No settlement yet.");
  const s = await api("GET", `/api/admin/settlements/${detail.settlement.id}`);
  const waiting = s.status === "AWAITING_OPERATOR"
    ? " It waits for an operator: retry it once the receiver is back, or mark it settled if the accounting system has the sale by other means."
    : s.status === "RETRY_SCHEDULED" ? ` Tried again at ${s.nextAttemptAt}.` : "";
  return el("div", {},
    el("p", { id: "o-settlement" },
      `Settlement ${s.id} ${s.status}: ${s.amount} ${s.currency}, ${s.attempts} attempt${s.attempts === 1 ? "" : "s"}` +
      (s.lastError ? `, last error: ${s.lastError}` : "") + (s.failureReason ? `, refused: ${s.failureReason}` : "") + "." + waiting),
    settlementActions(s, () => order(detail.id)));
}

// The order's notification as the operator needs it: its state, attempts, and the repairs
// (reprocess, ignore) while it failed or waits — the same actions as the Notifications page.
function orderNotification(detail) {
  const n = detail.notification;
  if (!n) return el("p", { id: "o-notification" }, "No notification yet.");
  const repairable = ["MANUAL_INTERVENTION_REQUIRED", "FAILED", "RETRY_SCHEDULED"].includes(n.status);
  const repair = async (verb) => {
    const reason = await reasonFor(`${verb === "reprocess" ? "reprocessing" : "ignoring"} notification ${n.id}`);
    if (reason === null) return;
    const after = await api("POST", `/api/admin/notification-events/${n.id}/${verb}`, { reason: reason || undefined });
    say(`Notification ${n.id}: order ${after.id} is ${after.status}.`);
    await order(detail.id);
  };
  return el("div", {},
    el("p", { id: "o-notification" },
      `Notification ${n.id} ${n.status}, policy ${n.policy || "none"}, ${n.attempts} attempt${n.attempts === 1 ? "" : "s"}` +
      (n.nextAttemptAt ? `, next at ${n.nextAttemptAt}` : "") + "."),
    repairable ? el("span", {},
      el("button", { type: "button", id: "o-reprocess", onclick: () => repair("reprocess").catch((e) => say(e.message)) }, "Reprocess"), " ",
      el("button", { type: "button", id: "o-ignore", onclick: () => repair("ignore").catch((e) => say(e.message)) }, "Ignore"))
      : "");
}

async function order(id) {
  const [detail, flow] = await Promise.all([api("GET", `/api/orders/${id}`), api("GET", `/api/orders/${id}/flow`)]);
  const settlement = await orderSettlement(detail);
  const p = detail.payment;
  // The provider's own record, live, beside ours (a provider with nothing to show says so).
  let provider = null;
  if (p) {
    try {
      provider = pretty(JSON.stringify((await api("GET", `/api/admin/payments/${p.id}/provider`)).provider));
    } catch (e) {
      provider = e.status === 409 ? "The provider shows nothing for this payment." : `Could not ask the provider: ${e.message}`;
    }
  }
  $("o-body").replaceChildren(
    el("p", { id: "o-summary" }, `Order #${detail.number} (${detail.id}): ${detail.status}` + (detail.failureStage ? ` (failed at ${detail.failureStage})` : "")),
    el("p", { id: "o-source" }, `Placed through ${SOURCES[detail.source] || detail.source}.`),
    el("h3", {}, "Payment"),
    p ? el("p", { id: "o-payment" },
      `Payment #${p.number} ${p.status}: ${p.amount} ${detail.currency}, refunded ${p.refundedAmount}, balance ${p.balance}` +
      (p.refundFailureReason ? ` (last refund refused: ${p.refundFailureReason})` : ""))
      : el("p", {}, "No payment yet."),
    el("h3", {}, "Settlement"),
    settlement,
    p && p.payout ? el("p", { id: "o-payout" },
      `Settled by the provider: fee ${p.payout.fee}, paid out ${p.payout.payOutAmount} on ${p.payout.paidOutDate} (sold ${p.payout.soldDate}).`)
      : p ? el("p", { id: "o-payout" }, "Not settled by the provider yet.") : el("span"),
    el("h3", {}, "Notification"),
    orderNotification(detail),
    el("h3", {}, "Refunds"),
    table(["when", "amount", "status", "by", "reason", "provider's key"], detail.refunds.map((r) => [
      r.createdAt, String(r.amount), r.status + (r.failureReason ? `: ${r.failureReason}` : ""), r.actor, r.reason,
      r.providerTransactionKey || ""])),
    el("h3", {}, "At the provider"),
    p ? el("pre", { id: "o-provider" }, provider) : el("p", {}, "Nothing to ask the provider about."),
    el("h3", {}, "Saga steps"),
    table(["when", "step", "status", "detail"], flow.steps.map((s) => [s.createdAt, s.step, s.status, s.detail || ""])),
    el("h3", {}, "Events"),
    table(["id", "event type", "delivery", "failure", "published at"], flow.events.map((e) => [
      String(e.id), e.eventType, e.status, e.failureCode || "", e.publishedAt || ""])),
    el("h3", {}, "Audit"),
    table(["when", "action", "by", "detail"], flow.audit.map((a) => [a.createdAt, a.action, a.actor, a.detail || ""])));
}

$("o-form").addEventListener("submit", (event) => {
  event.preventDefault();
  location.hash = `#order/${new FormData($("o-form")).get("id").trim()}`;
});

// ---- the provider's ledger -------------------------------------------------------------

// Yesterday in the provider's zone (Toss: Asia/Seoul, UTC+09:00): the day the worker runs.
function providerYesterday() {
  return new Date(Date.now() + 9 * 3600 * 1000 - 86400 * 1000).toISOString().slice(0, 10);
}

async function ledger(date) {
  const found = await api("GET", `/api/admin/reconciliation/findings?date=${encodeURIComponent(date)}`);
  const run = found.run;
  $("l-body").replaceChildren(
    el("p", { id: "l-run" }, run === null
      ? `${found.date} has not been reconciled (the worker runs the previous day at payment.toss.ledger_at; by hand: app reconcile ledger --date ${found.date}).`
      : `${found.date}: ${run.transactions} transactions at the provider, ` +
        (run.clean ? "clean: our books agree." : `${found.findings.length} findings.`) + ` Run ${run.finishedAt}.`),
    table(["kind", "payment key", "order id", "transaction key", "ours", "theirs", "detail"], found.findings.map((f) => [
      f.kind, f.paymentKey || "", f.orderId || "", f.transactionKey || "", f.ours || "", f.theirs || "", f.detail])));
}

$("l-form").addEventListener("submit", (event) => {
  event.preventDefault();
  location.hash = `#ledger/${new FormData($("l-form")).get("date").trim()}`;
});

// ---- what the provider pays out --------------------------------------------------------

// Today in the provider's zone.
function providerToday() {
  return new Date(Date.now() + 9 * 3600 * 1000).toISOString().slice(0, 10);
}

async function payouts(date) {
  const day = await api("GET", `/api/admin/payouts?date=${encodeURIComponent(date)}`);
  $("y-body").replaceChildren(
    day.providerLedger ? "" : el("p", { id: "y-no-ledger", class: "warning" },
      "This service's payment provider keeps no ledger: payouts are read from Toss and need payment.provider = toss. Nothing will be listed here."),
    el("p", { id: "y-total" }, day.count === 0
      ? `${day.date}: nothing to be paid out (no settlement recorded for that day yet).`
      : `${day.date}: ${day.payOutAmount} to be paid out for ${day.count} transactions of ${day.amount}, fees ${day.fee} (VAT ${day.vat}).`),
    table(["payment", "transaction key", "amount", "fee", "supply", "VAT", "payout", "sold", "paid out"], day.rows.map((r) => [
      r.paymentId, r.transactionKey || "", String(r.amount), String(r.fee), r.supplyAmount === null ? "" : String(r.supplyAmount),
      r.vat === null ? "" : String(r.vat), String(r.payOutAmount), r.soldDate, r.paidOutDate])));
}

$("y-form").addEventListener("submit", (event) => {
  event.preventDefault();
  location.hash = `#payouts/${new FormData($("y-form")).get("date").trim()}`;
});

// ---- merchants -------------------------------------------------------------------------

async function merchantsPage() {
  const list = await api("GET", "/api/merchants");
  $("m-body").replaceChildren(table(["Code", "Name", "Status", "Timezone", ""],
    list.map((m) => [m.code, m.name, m.status, m.timezone, el("a", { href: `#merchant/${m.id}` }, "Open")])));
  $("m-create").hidden = role() !== "operator";
}

$("m-create").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData($("m-create"));
  const body = { code: form.get("code").trim(), name: form.get("name").trim() };
  if (form.get("timezone").trim()) body.timezone = form.get("timezone").trim();
  try {
    const made = await api("POST", "/api/merchants", body);
    $("m-create").reset();
    say(`Merchant ${made.code} created.`);
    location.hash = `#merchant/${made.id}`;
  } catch (e) { say(e.message); }
});

function today(zone) {
  try { return new Intl.DateTimeFormat("en-CA", { timeZone: zone }).format(new Date()); }
  catch { return new Date().toISOString().slice(0, 10); }
}

function reportRows(lines, stores) {
  const storeName = (id) => (id ? (stores.find((s) => s.id === id) || { code: id }).code : "(no store)");
  return lines.map((l) => [storeName(l.storeId), l.currency, String(l.orders), String(l.gross), String(l.refunds),
    String(l.net), l.fees === null ? "not settled yet" : String(l.fees), l.payouts === null ? "not settled yet" : String(l.payouts)]);
}

async function merchantReport(id, date, stores) {
  const r = await api("GET", `/api/merchants/${id}/reports/daily?date=${encodeURIComponent(date)}`);
  const headers = ["Store", "Currency", "Orders", "Gross", "Refunds", "Net", "Fees", "Payouts"];
  $("mm-report").replaceChildren(
    el("p", {}, `${r.date} in ${r.timezone}`),
    el("h4", {}, "Total"), table(headers, reportRows(r.total, stores)),
    el("h4", {}, "Per store"), table(headers, reportRows(r.stores, stores)));
}

let currentMerchant = null;

async function merchantPage(id) {
  const list = await api("GET", "/api/merchants");
  const chosen = id || (list[0] && list[0].id);
  $("mm-picker").replaceChildren(...list.map((m) => el("option", { value: m.id, ...(m.id === chosen ? { selected: "" } : {}) }, `${m.code} — ${m.name}`)));
  if (!chosen) { $("mm-summary").replaceChildren(el("p", {}, "No merchant.")); return; }
  const m = await api("GET", `/api/merchants/${chosen}`);
  currentMerchant = m;
  $("mm-title").textContent = `Merchant ${m.code}`;
  $("mm-summary").replaceChildren(table(["Id", "Name", "Status", "Timezone", "Created"], [[m.id, m.name, m.status, m.timezone, m.createdAt]]));
  const stores = await api("GET", `/api/merchants/${m.id}/stores`);
  $("mm-stores").replaceChildren(table(["Code", "Name", "Status", "Timezone"], stores.map((s) => [s.code, s.name, s.status, s.timezone])));
  const operator = role() === "operator";
  $("mm-operator").hidden = !operator;
  $("mm-new-key").replaceChildren();
  if (operator) {
    const members = await api("GET", `/api/merchants/${m.id}/members`);
    $("mm-members").replaceChildren(table(["Subject", "Role", ""], members.map((p) => [p.subject, p.role,
      el("button", { type: "button", onclick: async () => {
        try { await api("DELETE", `/api/merchants/${m.id}/members/${encodeURIComponent(p.subject)}`); await merchantPage(m.id); say(`${p.subject} removed.`); }
        catch (e) { say(e.message); }
      } }, "Remove")])));
    const keys = await api("GET", `/api/merchants/${m.id}/api-keys`);
    $("mm-keys").replaceChildren(table(["Name", "Role", "Prefix", "Last used", "Expires", "Revoked", ""], keys.map((k) => [k.name, k.role, k.prefix,
      k.lastUsedAt || "never", k.expiresAt || "never", k.revokedAt || "", k.revokedAt ? "" : el("button", { type: "button", onclick: async () => {
        const reason = await reasonFor(`revoking key ${k.prefix}`);
        if (reason === null) return;
        try { await api("POST", `/api/merchants/${m.id}/api-keys/${k.id}/revoke`, reason ? { reason } : undefined); await merchantPage(m.id); say(`Key ${k.prefix} revoked.`); }
        catch (e) { say(e.message); }
      } }, "Revoke")])));
  }
  await merchantWebhooks(m.id);
  const form = $("mm-report-form");
  if (!form.elements.date.value) form.elements.date.value = today(m.timezone);
  await merchantReport(m.id, form.elements.date.value, stores);
}

$("mm-picker").addEventListener("change", () => { location.hash = `#merchant/${$("mm-picker").value}`; });

$("mm-store-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData($("mm-store-form"));
  try {
    const store = await api("POST", `/api/merchants/${currentMerchant.id}/stores`, { code: form.get("code").trim(), name: form.get("name").trim() });
    $("mm-store-form").reset();
    await merchantPage(currentMerchant.id);
    say(`Store ${store.code} registered.`);
  } catch (e) { say(e.message); }
});

$("mm-member-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData($("mm-member-form"));
  try {
    await api("PUT", `/api/merchants/${currentMerchant.id}/members/${encodeURIComponent(form.get("subject").trim())}`, { role: form.get("role") });
    $("mm-member-form").reset();
    await merchantPage(currentMerchant.id);
    say("Member set.");
  } catch (e) { say(e.message); }
});

$("mm-key-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData($("mm-key-form"));
  try {
    const made = await api("POST", `/api/merchants/${currentMerchant.id}/api-keys`, { name: form.get("name").trim(), role: form.get("role") });
    $("mm-key-form").reset();
    await merchantPage(currentMerchant.id);
    // Shown once, here only: it is in no list and no later answer.
    $("mm-new-key").replaceChildren(
      el("p", {}, `Key ${made.prefix} (${made.role}): copy it now — it is shown this once and kept only as a hash.`),
      el("pre", { id: "mm-new-key-value" }, made.key));
  } catch (e) { say(e.message); }
});

$("mm-report-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const stores = await api("GET", `/api/merchants/${currentMerchant.id}/stores`);
    await merchantReport(currentMerchant.id, $("mm-report-form").elements.date.value, stores);
  } catch (e) { say(e.message); }
});

// ---- merchants' webhooks (docs/webhooks.md) ---------------------------------------------

function endpointState(e) {
  return e.enabled ? "enabled" : el("strong", { class: "attention" }, `DISABLED: ${e.disabledReason}`);
}

async function merchantWebhooks(id) {
  const endpoints = await api("GET", `/api/merchants/${id}/webhook-endpoints`);
  $("mm-webhooks").replaceChildren(table(["URL", "Events", "State", "Created", ""], endpoints.map((e) => [
    e.url, e.eventTypes.join(", "), endpointState(e), e.createdAt,
    el("a", { href: `#webhook/${id}/${e.id}` }, "Messages")])));
}

let currentEndpoint = null;

async function webhookAttempts(m, e, eventId) {
  const log = await api("GET", `/api/merchants/${m}/webhook-endpoints/${e}/messages/${eventId}/attempts`);
  $("wh-attempts").replaceChildren(el("h4", {}, `Attempts of ${eventId}`),
    table(["#", "At", "Status", "ms", "Answer (first 4 KiB)"], log.attempts.map((a) => [
      String(a.attempt), a.at, a.status, String(a.durationMs), el("code", {}, a.response.slice(0, 200))])));
}

async function webhookPage() {
  const [, m, e] = location.hash.slice(1).split("/");
  currentEndpoint = { m, e };
  $("wh-back").setAttribute("href", `#merchant/${m}`);
  const endpoint = await api("GET", `/api/merchants/${m}/webhook-endpoints/${e}`);
  $("wh-title").textContent = `Webhook endpoint ${endpoint.url}`;
  $("wh-summary").replaceChildren(table(["Id", "Events", "State", "Description", "Created"],
    [[endpoint.id, endpoint.eventTypes.join(", "), endpointState(endpoint), endpoint.description, endpoint.createdAt]]));
  $("wh-actions").replaceChildren(endpoint.enabled ? "" : el("button", { type: "button", id: "wh-enable", onclick: async () => {
    try { await api("POST", `/api/merchants/${m}/webhook-endpoints/${e}/enable`); say("Endpoint enabled."); await webhookPage(); }
    catch (err) { say(err.message); }
  } }, "Enable"));
  await webhookMessages();
}

async function webhookMessages() {
  const { m, e } = currentEndpoint;
  const status = $("wh-filter").elements.status.value;
  const page = await api("GET", `/api/merchants/${m}/webhook-endpoints/${e}/messages?limit=50${status ? `&status=${status}` : ""}`);
  $("wh-messages").replaceChildren(table(["Event", "Type", "Status", "Attempts", "Last answer", "Last attempt", "Next attempt", "", ""],
    page.items.map((x) => [x.eventId, x.eventType,
      x.status === "FAILED" ? el("strong", { class: "attention" }, x.status) : x.status,
      String(x.attempts), x.lastStatus || "", x.lastAttemptAt || "", x.nextAttemptAt || "",
      el("button", { type: "button", onclick: () => webhookAttempts(m, e, x.eventId).catch((err) => say(err.message)) }, "Attempts"),
      el("button", { type: "button", onclick: async () => {
        try { await api("POST", `/api/merchants/${m}/webhook-endpoints/${e}/messages/${x.eventId}/resend`); say(`Message ${x.eventId} resent.`); await webhookMessages(); }
        catch (err) { say(err.message); }
      } }, "Resend")])));
}

$("wh-filter").addEventListener("submit", (event) => { event.preventDefault(); webhookMessages().catch((e) => say(e.message)); });

$("wh-recover").addEventListener("submit", async (event) => {
  event.preventDefault();
  const { m, e } = currentEndpoint;
  const since = new Date($("wh-recover").elements.since.value).toISOString();
  try {
    const r = await api("POST", `/api/merchants/${m}/webhook-endpoints/${e}/recover`, { since });
    say(`${r.recovered} failed message(s) resent.`);
    await webhookMessages();
  } catch (err) { say(err.message); }
});

// ---- routing ---------------------------------------------------------------------------

let refresh = null;

async function route() {
  clearInterval(refresh);
  const signedIn = !!sessionStorage.getItem(TOKEN);
  const home = role() === "member" ? "merchants" : "overview";
  const [section, arg] = (location.hash.slice(1) || home).split("/");
  const known = [...document.querySelectorAll("main > section")].some((s) => s.id === section && s.id !== "sign-in");
  const show = !signedIn ? "sign-in" : known ? section : "unknown";
  if (show === "unknown") $("unknown-what").textContent = `#${section}`;
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== show;
  $("nav").hidden = !signedIn;
  // A member sees its merchants only: the operator's pages are not theirs.
  for (const a of document.querySelectorAll("nav a")) {
    a.hidden = role() === "member" && !["#merchants"].includes(a.getAttribute("href"));
  }
  for (const a of document.querySelectorAll("nav a")) {
    if (a.getAttribute("href") === `#${show}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!signedIn) return;
  say("");
  try {
    if (show === "overview") {
      await overview();
      refresh = setInterval(() => overview().catch((e) => say(e.message)), 10000);
    } else if (show === "dead-letters") await deadLetters();
    else if (show === "notifications") await notifications();
    else if (show === "settlements") await settlements();
    else if (show === "payments") await payments();
    else if (show === "orders") await orders();
    else if (show === "ledger") {
      const date = arg || providerYesterday();
      $("l-form").elements.date.value = date;
      await ledger(date);
    }
    else if (show === "payouts") {
      const date = arg || providerToday();
      $("y-form").elements.date.value = date;
      await payouts(date);
    }
    else if (show === "merchants") await merchantsPage();
    else if (show === "merchant") await merchantPage(arg);
    else if (show === "webhook") await webhookPage();
    else if (show === "order" && arg) {
      $("o-form").elements.id.value = arg;
      await order(arg);
    }
  } catch (e) {
    if (e.status === 401) { sessionStorage.removeItem(TOKEN); route(); return; }
    say(e.message);
  }
}

window.addEventListener("hashchange", route);
route();
