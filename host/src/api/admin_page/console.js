// The console's frame: sign-in, the views behind `#/…` (the browser's back button and links work), and the
// refresh of the open view every 2 s.

import { $, act, api, say, session } from "./shared.js";
import * as overview from "./overview.js";
import * as tenants from "./tenants.js";
import * as users from "./users.js";
import * as jobs from "./jobs.js";
import * as audit from "./audit.js";

/** Each view: what opens it (with the route's argument) and what refreshes it while it is open. */
const VIEWS = { overview, tenants, tenant: tenants.tenantView, users, jobs, audit };
let open = null;

function route() {
  const [name, ...rest] = location.hash.replace(/^#\//, "").split("/");
  const fallback = session.ownTenant === null ? "overview" : "tenant";
  const known = Object.hasOwn(VIEWS, name) && !(session.ownTenant !== null && (name === "overview" || name === "tenants"));
  const view = known ? name : fallback;
  return { view, argument: rest.map(decodeURIComponent).join("/") };
}

async function show() {
  const { view, argument } = route();
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.dataset.view !== view;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  open = VIEWS[view];
  say("");
  await open.show(argument);
}

async function signIn() {
  const me = await api("GET", "/admin/v1/whoami");
  session.ownTenant = me.tenant;
  session.actor = me.actor;
  sessionStorage.setItem("strand-admin-token", session.token);
  $("#whoami").textContent = me.tenant === null ? "Signed in as the platform admin" : `Signed in with ${me.actor} of tenant ${me.tenant}`;
  // A tenant key sees its own tenant only: no node-wide charts, no other tenant, no admin-only forms.
  for (const adminOnly of document.querySelectorAll("[data-admin]")) adminOnly.hidden = me.tenant !== null;
  // The admin reaches a tenant's page from the list; a key's team has its one tenant in the navigation.
  $("#nav-tenant").hidden = me.tenant === null;
  $("#nav-tenant").href = `#/tenant/${encodeURIComponent(me.tenant)}`;
  $("#sign-in").hidden = true;
  $("#nav").hidden = false;
  $("#sign-out").hidden = false;
  $("#console").hidden = false;
  await show();
}

$("#sign-in").onsubmit = act(() => {
  session.token = $("#token").value;
  return signIn();
});
$("#sign-out").onclick = () => {
  sessionStorage.removeItem("strand-admin-token");
  location.hash = "";
  location.reload();
};
window.addEventListener("hashchange", act(show));

/** The open view's refresh, 2 s after the last one ended: a slow answer never piles requests up. */
async function refreshLoop() {
  if (open && open.refresh && !$("#console").hidden && !$("#confirm").open) {
    await open.refresh().catch((e) => say(e.message, true));
  }
  setTimeout(refreshLoop, 2000);
}
refreshLoop();

if (session.token) signIn().catch((e) => say(e.message, true));
