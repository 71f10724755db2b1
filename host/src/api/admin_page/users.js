// A user's relations, support staff's first question: by tenant and user id — the account's state and
// privacy, its counts as the API serves them, the relationship with another id, its lists page by page,
// its latest relation changes and its jobs; suspend, restore, move or delete it with a confirmation.

import { $, act, api, card, el, enc, fill, progress, row, session, startJob, tenantPath } from "./shared.js";

let shown = null; // { tenant, user }
let list = { name: "followers", cursor: null };

export async function show(argument) {
  const tenantInput = $("#lookup-tenant");
  tenantInput.readOnly = session.ownTenant !== null;
  if (session.ownTenant !== null) tenantInput.value = session.ownTenant;
  const [tenant, user] = argument.split("/");
  if (tenant && user) {
    if (session.ownTenant === null) tenantInput.value = tenant;
    $("#lookup-user").value = user;
    await lookUp();
  }
}

export async function refresh() {
  if (shown) await drawJobs();
}

const userPath = () => `${tenantPath(shown.tenant)}/accounts/${enc(shown.user)}`;

async function lookUp() {
  const asked = { tenant: $("#lookup-tenant").value.trim(), user: $("#lookup-user").value.trim() };
  const other = $("#lookup-with").value.trim();
  // Nothing of the user shown before stays on the page (nor do its actions) while another is looked up.
  $("#user").hidden = true;
  shown = null;
  const path = `${tenantPath(asked.tenant)}/accounts/${enc(asked.user)}/relations`;
  const relations = await api("GET", `${path}${other ? "?with=" + enc(other) : ""}`);
  shown = asked;
  $("#user-cards").replaceChildren(
    card("user", String(relations.user_id), "user-id"),
    card("state", relations.state, "user-state"),
    card("account", relations.private ? "private" : "public", "user-private"),
    card("followers", String(relations.counts.followers), "user-followers"),
    card("following", String(relations.counts.followings), "user-followings"));
  $("#relationship").textContent = relations.relationship ? describe(relations.user_id, relations.relationship) : "";
  fill("#recent", relations.recent.map((c) => row([c.at, c.relation, String(c.from), String(c.to), c.state, String(c.version)], [5])),
    "no relation yet");
  await Promise.all([openList(list.name), drawJobs()]);
  $("#user").hidden = false;
}

function describe(user, r) {
  const facts = [
    r.following && `${user} follows ${r.user_id}`, r.followed_by && `${r.user_id} follows ${user}`,
    r.requested && `${user} asked to follow ${r.user_id}`, r.requested_by && `${r.user_id} asked to follow ${user}`,
    r.blocking && `${user} blocks ${r.user_id}`, r.blocked_by && `${r.user_id} blocks ${user}`,
    r.muting && `${user} mutes ${r.user_id}${r.muting_expires_at ? " until " + r.muting_expires_at : ""}`,
  ].filter(Boolean);
  return facts.length ? facts.join("; ") + "." : `${user} and ${r.user_id} are not related.`;
}

async function openList(name, cursor) {
  list = { name, cursor: cursor || null };
  for (const tab of document.querySelectorAll("#user-lists button")) tab.setAttribute("aria-selected", String(tab.dataset.list === name));
  const page = await api("GET", `${userPath()}/relations/${name}?limit=20${cursor ? "&cursor=" + enc(cursor) : ""}`);
  fill("#user-list", page.items.map((u) => {
    const link = el("a", String(u.user_id));
    link.href = `#/users/${enc(shown.tenant)}/${u.user_id}`;
    return row([link, u.since, u.expires_at || ""]);
  }), "empty");
  const more = $("#user-list-more");
  more.hidden = !page.next_cursor;
  more.onclick = act(() => openList(name, page.next_cursor));
}

async function drawJobs() {
  const { jobs } = await api("GET", userPath());
  fill("#user-jobs", jobs.map((j) => {
    const tr = row([String(j.id), j.to === null ? j.kind : `${j.kind} → ${j.to}`, j.step, progress(j.done, j.total), j.state, j.error || ""]);
    tr.dataset.job = String(j.id);
    return tr;
  }), "no job");
}

$("#lookup").onsubmit = act(async () => {
  const tenant = $("#lookup-tenant").value.trim(), user = $("#lookup-user").value.trim();
  const hash = `#/users/${enc(tenant)}/${enc(user)}`;
  if (location.hash === hash) await lookUp(); else location.hash = hash;
});

for (const tab of document.querySelectorAll("#user-lists button")) tab.onclick = act(() => openList(tab.dataset.list));

for (const action of document.querySelectorAll("#user-actions button")) {
  action.onclick = act(async () => {
    const kind = action.dataset.job;
    let to = null;
    if (kind === "move") {
      to = prompt(`Move the followers of ${shown.user} to which account id?`);
      if (!to) return;
    }
    if (await startJob(shown.tenant, kind, shown.user, to)) await drawJobs();
  });
}
