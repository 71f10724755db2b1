// Tenants: the searchable list with each tenant's figures (platform admin only), and a tenant's page — its
// plugins (bundled ones marked) with every version and rollout, deploy / promote / abort / roll back with
// confirmation, logs, shadow diffs, automatic rollbacks, parked work, settings, keys and quotas.

import { $, act, api, button, card, confirmAction, el, enc, fill, rate, row, say, session, tenantPath } from "./shared.js";

let figures = [];

export async function show() {
  $("#tenant-search").oninput = draw;
  listedAt = 0;
  await refresh();
}

let listedAt = 0;

/** The list again every 10 s (its writes/s are the history's points, taken every 10 s). */
export async function refresh() {
  if (Date.now() - listedAt < 10_000) return;
  listedAt = Date.now();
  figures = (await api("GET", "/admin/v1/tenants")).figures;
  draw();
}

function draw() {
  const search = $("#tenant-search").value.trim().toLowerCase();
  fill("#tenants", figures.filter((f) => f.tenant.toLowerCase().includes(search)).map((f) => {
    const link = el("a", f.tenant);
    link.href = `#/tenant/${enc(f.tenant)}`;
    link.dataset.tenant = f.tenant;
    const parked = (n) => el("span", String(n), n > 0 ? "warn" : "");
    return row([link, rate(f.writes_per_second), rate(f.denied_per_second), parked(f.parked_rows), parked(f.parked_events),
      f.oldest_parked_at || "", el("span", String(f.dead_letters), f.dead_letters > 0 ? "bad" : ""), quota(f.quota_use)],
    [1, 2, 3, 4, 6, 7]);
  }), search ? "no tenant matches" : "no tenant yet");
}

function quota(share) {
  if (share === null) return "–";
  return el("span", `${(share * 100).toFixed(share < 0.1 ? 1 : 0)} %`, share >= 0.9 ? "bad" : share >= 0.7 ? "warn" : "");
}

/** A tenant's page. */
export const tenantView = {
  tenant: "",
  async show(name) {
    const tenant = session.ownTenant ?? name;
    if (!tenant) {
      location.hash = "#/tenants";
      return;
    }
    this.tenant = tenant;
    $("#tenant-name").textContent = tenant;
    $("#plugin-logs").hidden = true;
    $("#shadow-diff").hidden = true;
    await Promise.all([drawPlugins(tenant), drawCards(tenant), drawRollbacks(tenant), drawSettings(tenant), drawKeys(tenant)]);
  },
  async refresh() {
    await drawCards(this.tenant);
  },
};

const slotPath = (tenant, kind, name) => `${tenantPath(tenant)}/plugins/${enc(kind)}/${enc(name)}`;

/** Whether `tenant`'s answers may still be drawn: not once the page shows another tenant. */
const current = (tenant) => tenant === tenantView.tenant;

async function drawCards(tenant) {
  const [f, parked] = await Promise.all([api("GET", `${tenantPath(tenant)}/figures`), api("GET", `${tenantPath(tenant)}/parked`)]);
  if (!current(tenant)) return;
  $("#tenant-cards").replaceChildren(
    card("writes/s (this node)", rate(f.writes_per_second), "tenant-writes"),
    card("denied/s", rate(f.denied_per_second), "tenant-denied"),
    card("parked rows / events", `${f.parked_rows} / ${f.parked_events}`, "tenant-parked"),
    card("dead letters (this node)", String(f.dead_letters), "tenant-dead-letters"),
    card("fullest space of the quota", f.quota_use === null ? "–" : `${(f.quota_use * 100).toFixed(1)} %`, "tenant-quota"));
  $("#parked").textContent = parked.rows === 0 ? "The relay holds nothing back for the tenant."
    : `The relay holds ${parked.rows} rows back since ${parked.oldest_parked_at}: ${parked.reason}`;
  fill("#parked-projections", parked.projections.map((p) => row([p.projection, String(p.events), p.oldest_parked_at, p.reason], [1])),
    "no projection holds the tenant's events back");
}

async function drawPlugins(tenant) {
  const { plugins, bundled, rollouts } = await api("GET", `${tenantPath(tenant)}/plugins`);
  if (!current(tenant)) return;
  const versions = plugins.map((p) => {
    const actions = el("span");
    const rollout = rollouts.find((r) => r.kind === p.kind && r.name === p.name && r.candidate_version === p.version);
    if (p.state === "canary" || p.state === "shadow") {
      actions.append(button("Promote…", () => rolloutStep(tenant, p, "promote"), "promote"),
        button("Abort…", () => rolloutStep(tenant, p, "abort"), "abort danger"));
      if (p.state === "shadow") actions.append(button("Diff", () => showDiff(tenant, p), "diff"));
    } else if (p.state === "inactive") {
      actions.append(button("Roll back to v" + p.version + "…", () => rollback(tenant, p), "rollback"));
    }
    if (p.state === "active") actions.append(button("Logs", () => showLogs(tenant, p), "logs"));
    const tr = row([p.kind, p.name, String(p.version), describeState(p, rollout), p.sha256.slice(0, 12), String(p.size_bytes),
      p.created_at, actions], [5]);
    tr.dataset.plugin = `${p.kind}/${p.name}/${p.version}`;
    if (p.state === "active") tr.className = "active";
    return tr;
  });
  const builtIn = bundled.map((b) => {
    const tr = row([b.kind, b.name, "bundled", b.serving ? "bundled, serving" : "bundled, replaced by the tenant's",
      b.sha256.slice(0, 12), "", "", ""]);
    tr.className = "bundled";
    tr.dataset.plugin = `${b.kind}/${b.name}/bundled`;
    return tr;
  });
  fill("#plugins", [...versions, ...builtIn]);
}

/** A version's state; a running canary's or shadow's with both versions' calls and failures on this node. */
function describeState(p, rollout) {
  const mode = p.state === "canary" ? `canary ${p.canary_percent}%` : p.state;
  if (!rollout || !rollout.rates) return mode;
  const { candidate, stable } = rollout.rates;
  return `${mode} · failed ${candidate.failures}/${candidate.calls} (stable ${stable.failures}/${stable.calls})`;
}

async function rolloutStep(tenant, p, step) {
  const consequence = step === "promote"
    ? `Promote ${p.state} version ${p.version} of ${p.kind} ${p.name}: it serves all of ${tenant}'s traffic${p.state === "shadow" ? " and reads" : ""}.`
    : `Abort ${p.state} version ${p.version} of ${p.kind} ${p.name}: all of ${tenant}'s traffic returns to the active version${p.state === "shadow" ? " and the shadow's data is dropped" : ""}.`;
  if (!(await confirmAction(consequence))) return;
  await api("POST", slotPath(tenant, p.kind, p.name) + "/" + step);
  say(`${p.kind} ${p.name}: ${p.state} v${p.version} ${step === "promote" ? "promoted" : "aborted"}`);
  await Promise.all([drawPlugins(tenant), drawRollbacks(tenant)]);
}

async function rollback(tenant, p) {
  if (!(await confirmAction(`Roll ${p.kind} ${p.name} of ${tenant} back to version ${p.version}: it serves all of the traffic at once.`))) return;
  const active = await api("POST", slotPath(tenant, p.kind, p.name) + "/rollback", JSON.stringify({ version: p.version }), "application/json");
  say(`${active.kind} ${active.name}: version ${active.version} is active`);
  await drawPlugins(tenant);
}

async function showDiff(tenant, p) {
  const diff = await api("GET", slotPath(tenant, p.kind, p.name) + "/diff");
  $("#diff-of").textContent = `${p.name} v${p.version}`;
  $("#diff").textContent = `active v${diff.active.version}: ${JSON.stringify(diff.active)}\nshadow v${diff.shadow.version}: ${JSON.stringify(diff.shadow)}\n` +
    `only in active: ${diff.only_in_active.length}, only in shadow: ${diff.only_in_shadow.length}, ` +
    `compared ${diff.compared}, differing ${diff.differing.length}`;
  $("#shadow-diff").hidden = false;
}

/** What a plugin logged, newest first: the plugin's own text, so only ever text. */
async function showLogs(tenant, p) {
  const { entries } = await api("GET", slotPath(tenant, p.kind, p.name) + "/logs?limit=100");
  $("#logs-of").textContent = `${p.kind} ${p.name}`;
  fill("#logs", entries.map((e) => row([e.at, String(e.version), e.level, e.input || "", e.message])), "nothing logged");
  $("#plugin-logs").hidden = false;
}

async function drawRollbacks(tenant) {
  const { entries } = await api("GET", `/admin/v1/audit?limit=20&tenant=${enc(tenant)}&action=automatic_rollback`);
  if (!current(tenant)) return;
  fill("#rollbacks", entries.map((e) => row([e.at, e.slot || "", e.version === null ? "" : String(e.version), e.detail])),
    "the host has rolled nothing back");
}

async function drawSettings(tenant) {
  const settings = await api("GET", `${tenantPath(tenant)}/settings`);
  if (!current(tenant)) return;
  $("#rate-limit-failure").value = settings.rate_limit_failure;
  $("#relation-policy-failure").value = settings.relation_policy_failure || settings.rate_limit_failure;
  $("#allow-pinned").checked = settings.allow_pinned_versions;
}

async function drawKeys(tenant) {
  const [{ keys }, jwt] = await Promise.all([api("GET", `${tenantPath(tenant)}/keys`), api("GET", `${tenantPath(tenant)}/jwt-keys`)]);
  if (!current(tenant)) return;
  fill("#keys", keys.map((k) => row([k.name, k.created_at, k.last_used_at || "never",
    session.ownTenant === null ? button("Revoke…", () => revokeKey(tenant, k.name), "danger") : ""])), "no key");
  fill("#jwt-keys", jwt.keys.map((k) => row([k.kid, k.algorithm, k.created_at])), "none: the platform's JWT keys verify its users");
}

async function revokeKey(tenant, name) {
  if (!(await confirmAction(`Revoke key ${name} of ${tenant}: requests with it are refused from now on.`))) return;
  await api("DELETE", `${tenantPath(tenant)}/keys/${enc(name)}`);
  say(`key ${name} revoked`);
  await drawKeys(tenant);
}

$("#deploy").onsubmit = act(async () => {
  const tenant = tenantView.tenant, kind = $("#deploy-kind").value, name = $("#deploy-name").value;
  const mode = $("#deploy-mode").value, percent = Number($("#deploy-percent").value);
  const file = $("#deploy-file").files[0];
  const how = mode === "canary" ? `as a canary taking ${percent}% of the traffic` : mode === "shadow" ? "as a shadow beside the active version" : "to all of the traffic at once";
  if (!(await confirmAction(`Deploy ${file.name} (${file.size} bytes) as the next version of ${kind} ${name} of ${tenant}, ${how}.`))) return;
  const query = mode === "canary" ? `?canary=${percent}` : mode === "shadow" ? "?shadow=true" : "";
  const deployed = await api("PUT", slotPath(tenant, kind, name) + query, await file.arrayBuffer(), "application/wasm");
  const p = deployed.plugin;
  say(`${p.kind} ${p.name}: version ${p.version} deployed and ${p.state === "canary" ? `a canary at ${p.canary_percent}%` : p.state}`);
  await drawPlugins(tenant);
});

$("#settings").onsubmit = act(async () => {
  const settings = { rate_limit_failure: $("#rate-limit-failure").value, relation_policy_failure: $("#relation-policy-failure").value,
    allow_pinned_versions: $("#allow-pinned").checked };
  await api("PUT", `${tenantPath(tenantView.tenant)}/settings`, JSON.stringify(settings), "application/json");
  say(`settings of ${tenantView.tenant} saved`);
});

$("#new-key").onsubmit = act(async () => {
  const tenant = tenantView.tenant;
  const issued = await api("POST", `${tenantPath(tenant)}/keys`, JSON.stringify({ name: $("#key-name").value }), "application/json");
  await confirmAction(`Key ${issued.name} of ${tenant}: ${issued.secret} — copy it now; it is not stored and cannot be shown again.`);
  await drawKeys(tenant);
});
