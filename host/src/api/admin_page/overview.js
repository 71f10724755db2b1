// The pipeline at a glance (platform admin only): the node's last hour as charts, with the shipped alert
// rules' thresholds dashed where one pages; the relay's backlog, each projection's events behind, backfills.

import { $, api, el, fill, row } from "./shared.js";

const SVG = "http://www.w3.org/2000/svg";

export async function show() {
  await refresh();
}

export async function refresh() {
  await Promise.all([refreshCharts(), refreshPipeline()]);
}

async function refreshPipeline() {
  const [lag, projections] = await Promise.all([api("GET", "/admin/v1/lag"), api("GET", "/admin/v1/projections")]);
  $("#relay").textContent = `Relay: ${lag.relay.outbox_rows} rows to publish, oldest ${lag.relay.oldest_ms} ms`;
  fill("#consumers", lag.consumers.map((c) => row([c.projection, String(c.behind),
    c.partitions.map((p) => `${p.partition}: ${p.committed} / ${p.end}`).join(", ")], [1])));
  fill("#backfills", projections.backfills.map((b) => row([b.projection, b.tenant, String(b.plugin_version),
    `${b.done} / ${b.total}`, b.state])), "no backfill");
}

async function refreshCharts() {
  const history = await api("GET", "/admin/v1/history");
  $("#charts-note").textContent = `(this node's, a point every ${history.every_seconds} s, kept an hour)`;
  $("#charts").replaceChildren(...history.series.map(chart));
}

/** The time a chart spans: the last hour, or since its first point when that is nearer (at least 10 min). */
function span(points, now) {
  const minute = 60 * 1000;
  const since = points.length ? now - points[0][0] : 0;
  return Math.min(60 * minute, Math.max(10 * minute, since));
}

/** One series as a small chart: the line, the value now, the alert threshold if any. */
function chart(series) {
  const now = Date.now(), shown = span(series.points, now);
  const box = el("div", null, "chart");
  box.id = "chart-" + series.name;
  const last = series.points.length ? series.points[series.points.length - 1][1] : null;
  const value = el("span", last === null ? "–" : `${+last.toPrecision(3)} ${series.unit}`, "now");
  const title = el("h3", series.title);
  title.append(value);
  const top = Math.max(...series.points.map((p) => p[1]), series.threshold === null ? 0 : series.threshold * 1.2, 1e-9);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 360 100");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${series.title}: ${value.textContent}`);
  const y = (v) => (100 - (v / top) * 96).toFixed(1);
  if (series.threshold !== null) {
    const line = document.createElementNS(SVG, "line");
    line.setAttribute("class", "threshold");
    for (const [k, v] of [["x1", 0], ["x2", 360], ["y1", y(series.threshold)], ["y2", y(series.threshold)]]) line.setAttribute(k, v);
    svg.append(line);
  }
  const polyline = document.createElementNS(SVG, "polyline");
  polyline.setAttribute("points", series.points.map(([at, v]) => `${(360 * (1 - (now - at) / shown)).toFixed(1)},${y(v)}`).join(" "));
  svg.append(polyline);
  const spanned = `the last ${Math.round(shown / 60000)} min`;
  const note = el("div", series.threshold === null ? spanned : `${spanned} · alert past ${series.threshold} ${series.unit}`, "note");
  box.append(title, svg, note);
  return box;
}
