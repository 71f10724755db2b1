// What every view of the console uses: the API with the signed-in credential, status messages, table rows
// built from text (never markup: tenants' names, plugin logs and deny reasons are shown as they are), and
// the confirmation every action with a consequence asks for.

export const $ = (selector) => document.querySelector(selector);

/** Who is signed in: the credential, and the one tenant a tenant key reaches (null for the admin). */
export const session = { token: sessionStorage.getItem("strand-admin-token") || "", ownTenant: null, actor: "" };

export function say(text, error) {
  $("#status").textContent = text;
  $("#status").className = error ? "error" : "";
}

/**
 * Runs an action from a click or a submit; what an earlier one said goes, and its failure (the API's
 * problem) is shown, never lost.
 */
export function act(action) {
  return (event) => {
    if (event) event.preventDefault();
    say("");
    Promise.resolve().then(action).catch((e) => say(e.message, true));
  };
}

/** An answer's problem (`code: detail`), or its status when the body is not the API's (a proxy's page). */
export function problem(status, text) {
  try {
    const data = JSON.parse(text);
    if (data && data.code) return new Error(`${data.code}: ${data.detail}`);
  } catch {
    // Not JSON: the status says what there is to say.
  }
  return new Error(`HTTP ${status}`);
}

/** Every admin call: the bearer token, and a problem+json error shown as its code and detail. */
export async function api(method, path, body, type) {
  const headers = { Authorization: "Bearer " + session.token };
  if (type) headers["Content-Type"] = type;
  const response = await fetch(path, { method, headers, body });
  const text = await response.text();
  if (!response.ok) throw problem(response.status, text);
  return text ? JSON.parse(text) : null;
}

export const enc = encodeURIComponent;
export const tenantPath = (tenant) => `/admin/v1/tenants/${enc(tenant)}`;

/** An element with text (and a class), for cells that are more than a string. */
export function el(tag, text, className) {
  const element = document.createElement(tag);
  if (text !== undefined && text !== null) element.textContent = text;
  if (className) element.className = className;
  return element;
}

export function button(label, onclick, className) {
  const b = el("button", label, className);
  b.type = "button";
  b.onclick = act(onclick);
  return b;
}

/** A table row: strings become text cells, nodes are placed as they are; `numbers` right-aligns those columns. */
export function row(cells, numbers = []) {
  const tr = document.createElement("tr");
  cells.forEach((cell, i) => {
    const td = document.createElement("td");
    if (cell instanceof Node) td.append(cell); else td.textContent = cell === null || cell === undefined ? "" : String(cell);
    if (numbers.includes(i)) td.className = "number";
    tr.append(td);
  });
  return tr;
}

export function fill(table, rows, empty) {
  const body = $(table + " tbody");
  if (rows.length === 0 && empty) {
    const tr = row([el("span", empty, "note")]);
    tr.firstChild.colSpan = $(table + " thead tr").children.length;
    body.replaceChildren(tr);
  } else {
    body.replaceChildren(...rows);
  }
}

/** A progress bar with its figures beside it: `done / total`, done may pass total (edges begun meanwhile). */
export function progress(done, total) {
  const span = el("span");
  const bar = document.createElement("progress");
  bar.max = Math.max(total, done, 1);
  bar.value = done;
  span.append(bar, ` ${done} / ${total}`);
  return span;
}

/** A figure in a card: its label above its value (the value's element found by `id`). */
export function card(label, value, id) {
  const box = el("div", null, "card");
  const shown = el("div", value, "value");
  shown.id = id;
  box.append(el("div", label, "label"), shown);
  return box;
}

export const rate = (value) => (value >= 10 ? value.toFixed(0) : value.toFixed(1));

/**
 * Asks before an action with a consequence; resolves true only on Confirm. The text names what will happen
 * (set as text: it may hold a tenant's names).
 */
export function confirmAction(text) {
  const dialog = $("#confirm");
  $("#confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.onclose = () => {
      $("#confirm-text").textContent = "";
      resolve(dialog.returnValue === "ok");
    };
    dialog.returnValue = "";
    dialog.showModal();
    $("#confirm-cancel").focus();
  });
}

/** Starts an account job after the confirmation that names the account and what will happen. */
export async function startJob(tenant, kind, user, to) {
  const what = {
    delete: `Delete account ${user} of ${tenant}: every relation it has ends (each with its event), then its rows are erased; no relation with it can begin again. This cannot be undone.`,
    suspend: `Suspend account ${user} of ${tenant}: its follows and requests are hidden both ways (each ends with its event) until it is restored.`,
    restore: `Restore account ${user} of ${tenant}: what its suspension hid comes back where the other account is active and no block holds.`,
    move: `Move the followers of account ${user} of ${tenant} to account ${to}: they follow ${to} instead.`,
  }[kind];
  if (!(await confirmAction(what))) return null;
  const body = JSON.stringify(kind === "move" ? { kind, to } : { kind });
  const job = await api("POST", `${tenantPath(tenant)}/accounts/${enc(user)}/jobs`, body, "application/json");
  say(`Job ${job.id} started: ${kind} account ${user}`);
  return job;
}
