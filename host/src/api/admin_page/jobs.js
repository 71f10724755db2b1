// A tenant's account jobs with live progress, one started from a form with a confirmation naming the
// account; the tenant's graph imported from a file (upload progress, then the import's report) and exported
// (edges received so far, then a file to save).

import { $, act, api, confirmAction, el, fill, problem, progress, row, say, session, startJob, tenantPath } from "./shared.js";

let tenant = "";

export async function show(argument) {
  // The tenant the address names, else the one shown last (the navigation's link names none).
  tenant = session.ownTenant ?? (argument || tenant);
  $("#jobs-tenant").value = tenant;
  $("#jobs-tenant-name").textContent = tenant || "…";
  if (tenant) await refresh();
}

export async function refresh() {
  if (!tenant) return;
  const { jobs } = await api("GET", `${tenantPath(tenant)}/jobs`);
  fill("#jobs", jobs.map((j) => {
    const state = el("span", j.state, j.state === "failed" ? "bad" : j.state === "done" ? "active" : "");
    const tr = row([String(j.id), j.kind, j.to === null ? j.user : `${j.user} → ${j.to}`, j.step, progress(j.done, j.total), state,
      j.requested_by, j.error || ""]);
    tr.dataset.job = String(j.id);
    return tr;
  }), "no job yet");
}

$("#jobs-tenant-form").onsubmit = act(() => {
  location.hash = `#/jobs/${encodeURIComponent($("#jobs-tenant").value.trim())}`;
});

$("#start-job").onsubmit = act(async () => {
  if (!tenant) throw new Error("choose a tenant first");
  const kind = $("#job-kind").value, to = $("#job-to").value.trim() || null;
  if (kind === "move" && !to) throw new Error("a move needs its destination account");
  if (await startJob(tenant, kind, $("#job-user").value.trim(), to)) await refresh();
});

$("#import").onsubmit = act(async () => {
  if (!tenant) throw new Error("choose a tenant first");
  const file = $("#import-file").files[0];
  const csv = file.name.toLowerCase().endsWith(".csv");
  if (!(await confirmAction(`Import ${file.name} (${file.size} bytes, ${csv ? "CSV" : "NDJSON"}) into ${tenant}: edges that already hold are kept; blocks and inactive accounts refuse follows; the tenant's projections are built again afterwards.`))) return;
  const bar = $("#import-progress");
  bar.hidden = false;
  bar.value = 0;
  $("#import-state").textContent = "sending…";
  const report = await upload(`${tenantPath(tenant)}/import`, file, csv ? "text/csv" : "application/x-ndjson", (sent, total) => {
    bar.max = total;
    bar.value = sent;
    $("#import-state").textContent = sent < total ? `sent ${sent} of ${total} bytes` : "written to the truth…";
  });
  $("#import-state").textContent = `imported: ${Object.entries(report).map(([k, v]) => `${k} ${v}`).join(", ")}`;
  say(`import into ${tenant} done`);
});

/** A POST whose upload progress is reported (fetch reports none); the answer is the API's JSON. */
function upload(path, file, type, onProgress) {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open("POST", path);
    request.setRequestHeader("Authorization", "Bearer " + session.token);
    request.setRequestHeader("Content-Type", type);
    request.upload.onprogress = (e) => onProgress(e.loaded, e.total);
    request.onload = () => {
      if (request.status >= 200 && request.status < 300) resolve(JSON.parse(request.responseText));
      else reject(problem(request.status, request.responseText));
    };
    request.onerror = () => reject(new Error("the connection failed during the upload"));
    request.send(file);
  });
}

$("#export").onclick = act(async () => {
  if (!tenant) throw new Error("choose a tenant first");
  const response = await fetch(`${tenantPath(tenant)}/export`, { headers: { Authorization: "Bearer " + session.token } });
  if (!response.ok) throw problem(response.status, await response.text());
  const reader = response.body.getReader();
  const chunks = [];
  let edges = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    edges += value.reduce((n, byte) => n + (byte === 10), 0);
    $("#export-state").textContent = `${edges} edges received…`;
  }
  $("#export-state").textContent = `${edges} edges exported`;
  const link = $("#export-link");
  if (link.href.startsWith("blob:")) URL.revokeObjectURL(link.href);
  link.href = URL.createObjectURL(new Blob(chunks, { type: "application/x-ndjson" }));
  link.download = `${tenant}.ndjson`;
  link.hidden = false;
});
