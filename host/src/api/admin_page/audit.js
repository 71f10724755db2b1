// The audit log: every change made through the admin API and by the host, filtered by tenant, actor,
// action and time, newest first, older pages on demand.

import { $, act, api, el, row, session } from "./shared.js";

const ACTIONS = ["deploy", "rollback", "remove", "set_settings", "create_key", "revoke_key", "set_jwt_key", "remove_jwt_key",
  "promote", "abort", "automatic_rollback", "start_account_job", "import"];
let before = null;

export async function show() {
  const select = $("#audit-action");
  if (select.options.length === 1) {
    select.append(...ACTIONS.map((action) => {
      const option = el("option", action);
      option.value = action;
      return option;
    }));
  }
  await load(false);
}

function query() {
  const params = new URLSearchParams({ limit: "50" });
  const tenant = session.ownTenant ?? $("#audit-tenant").value.trim();
  const time = (id) => $(id).value && new Date($(id).value).toISOString();
  for (const [key, value] of [["tenant", tenant], ["actor", $("#audit-actor").value.trim()], ["action", $("#audit-action").value],
    ["since", time("#audit-since")], ["until", time("#audit-until")]]) {
    if (value) params.set(key, value);
  }
  if (before !== null) params.set("before", String(before));
  return params;
}

/** Text a tenant controls (details, slots) is only ever set as text. */
async function load(more) {
  if (!more) before = null;
  const page = await api("GET", `/admin/v1/audit?${query()}`);
  const rows = page.entries.map((e) => row([e.at, e.tenant, e.actor, e.action, e.slot || "", e.version === null ? "" : String(e.version),
    el("span", e.outcome, e.outcome === "ok" ? "" : "bad"), e.detail]));
  const body = $("#audit tbody");
  if (more) body.append(...rows); else body.replaceChildren(...rows);
  before = page.next_before;
  $("#audit-more").hidden = before === null;
}

$("#audit-filter").onsubmit = act(() => load(false));
$("#audit-more").onclick = act(() => load(true));
