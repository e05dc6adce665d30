// tutti console: the only script of the page (served by the console itself; no inline
// script is allowed by its Content-Security-Policy). Everything works without it except the
// live parts: the connectors' cards refresh, and the activity view's event stream.
"use strict";

// Replaces what `el` shows with the fragment at `url`.
async function reload(el, url) {
  try {
    const r = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (r.ok) {
      // Server-rendered and escaped by the console.
      el.innerHTML = await r.text();
    }
  } catch (e) {
    // The console is gone or restarting: keep the last view.
  }
}

function refreshCards(el) {
  const url = el.getAttribute("data-live");
  const refresh = () => reload(el, url);
  // Every committed or fenced generation, at once (the kernel's route stream)...
  const changes = new EventSource(url + "/events");
  changes.addEventListener("changed", refresh);
  // ...and status-only changes (restarts, retries) on a slower poll.
  setInterval(refresh, 5000);
}

// A fragment that changes on its own (the calls waiting for confirmation, their time
// left): fetched again every second.
function poll(el) {
  const url = el.getAttribute("data-poll");
  setInterval(() => reload(el, url), 1000);
}

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  row.appendChild(td);
}

function activity(table) {
  const body = table.querySelector("tbody");
  const params = new URLSearchParams();
  for (const name of ["connector", "outcome"]) {
    const v = table.getAttribute("data-" + name);
    if (v) params.set(name, v);
  }
  const source = new EventSource("/activity/events?" + params.toString());
  source.addEventListener("audit", (ev) => {
    let r;
    try { r = JSON.parse(ev.data); } catch (e) { return; }
    const row = document.createElement("tr");
    row.className = "event-" + (r.event || "");
    cell(row, r.time);
    cell(row, r.event);
    cell(row, r.connector);
    cell(row, r.tool);
    cell(row, r.risk);
    cell(row, r.outcome);
    cell(row, r.durationUs === undefined ? "" : (r.durationUs / 1000).toFixed(1) + " ms");
    cell(row, r.reason || (r.workspace ? r.workspace + "/" + (r.session || "") : ""));
    body.insertBefore(row, body.firstChild);
    while (body.rows.length > 500) body.deleteRow(body.rows.length - 1);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const cards = document.querySelector("[data-live]");
  if (cards) refreshCards(cards);
  const polled = document.querySelector("[data-poll]");
  if (polled) poll(polled);
  const table = document.getElementById("activity");
  if (table) activity(table);
});
