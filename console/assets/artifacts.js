// A run's artifacts, for the playground and the runs page: a table (name,
// size, media type, sha256), a download for each through GET
// /v1/executions/{id}/artifacts/{name} with the signed-in token (the
// route's own tenant and role rules: the console adds no way around them),
// and a preview of the images.
//
// Artifacts are hostile tool output. Names and types go in as text. Only
// PNG, JPEG, GIF and WebP are previewed, and only when their bytes start
// with that format's signature: they are drawn by an <img> from a blob:
// URL of the bytes (the console's CSP allows img-src blob: for this and
// nothing else). SVG, HTML and everything else are downloads only.

import { token, h, fmt, errorText } from "./dom.js";

// The media types previewed, each with the signature its bytes must start
// with (null: any byte).
const PREVIEW = {
  "image/png": [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a],
  "image/jpeg": [0xff, 0xd8, 0xff],
  "image/gif": [0x47, 0x49, 0x46, 0x38],
  "image/webp": [0x52, 0x49, 0x46, 0x46, null, null, null, null, 0x57, 0x45, 0x42, 0x50],
};
// The largest image previewed, and how many: a run may leave up to 1000
// artifacts of 64 MiB in all; the page fetches no more than this.
const MAX_PREVIEW_BYTES = 16 << 20;
const MAX_PREVIEWS = 8;
// How long a download's blob: URL lives (the browser has taken the file
// by then).
const REVOKE_MS = 60_000;

export function previewable(mime) { return Object.hasOwn(PREVIEW, mime); }

// signatureOK says whether bytes start as mime's format does.
export function signatureOK(mime, bytes) {
  const sig = PREVIEW[mime];
  if (!sig || bytes.length < sig.length) return false;
  return sig.every((b, i) => b === null || bytes[i] === b);
}

// artifactPath is the route of one artifact; an admin looking at another
// tenant's run names it with ?tenant=.
export function artifactPath(execID, name, tenant) {
  return "/v1/executions/" + encodeURIComponent(execID) + "/artifacts/" + encodeURIComponent(name) +
    (tenant ? "?tenant=" + encodeURIComponent(tenant) : "");
}

// fetchArtifact GETs an artifact with the token: {ok, status, bytes} or
// {ok: false, status, message}.
async function fetchArtifact(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token() } });
  if (r.ok) return { ok: true, status: r.status, bytes: new Uint8Array(await r.arrayBuffer()) };
  let body = null;
  try { body = await r.json(); } catch { /* not JSON: the status says it */ }
  if (r.status === 401) document.dispatchEvent(new CustomEvent("execgate:unauthenticated", { detail: body }));
  const gone = r.status === 404 ? " (artifacts are kept for the async result TTL, within the tenant's artifact budget)" : "";
  return { ok: false, status: r.status, message: errorText(body, r.status) + gone };
}

function fromBase64(b64) {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

export function fmtBytes(n) {
  if (typeof n !== "number") return String(n);
  if (n < 1024) return fmt(n) + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

// download fetches the artifact and hands it to the browser as a file
// named name (through a blob: URL: a plain link could not carry the
// token).
async function download(path, name, status) {
  status.textContent = "downloading…";
  let r;
  try { r = await fetchArtifact(path); } catch (e) { status.textContent = "failed: " + e.message; return; }
  if (!r.ok) { status.textContent = "failed: " + r.message; return; }
  const url = URL.createObjectURL(new Blob([r.bytes], { type: "application/octet-stream" }));
  const a = h("a", { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), REVOKE_MS);
  status.textContent = "downloaded (" + fmtBytes(r.bytes.length) + ")";
}

// artifactsView renders a run's artifacts. opts:
//   list: [{name, bytes, mime, sha256, base64?}] (an envelope's or an
//     audit record's)
//   execID, tenant: whose artifacts (tenant: for ?tenant=, or "")
//   access: "" when the token may download, else why not (no download
//     and no preview is offered then)
//   truncated: [{name, reason}], refused: files of out/ not collected
//   unlisted: artifacts collected but left out of the list (audit)
//   id: the section's id
export function artifactsView({ list = [], execID, tenant = "", access = "", truncated = [], refused = 0, unlisted = 0, id }) {
  const previews = h("div", { class: "previews", id: id + "-previews" });
  const rows = list.map((a) => {
    const path = artifactPath(execID, a.name, tenant);
    const status = h("span", { class: "muted small dl-status", role: "status" });
    const link = access ? h("span", { class: "muted small" }, "—") :
      h("a", { href: path, class: "download", "aria-label": "Download " + a.name, dataset: { name: a.name }, onclick: (e) => { e.preventDefault(); download(path, a.name, status); },
        onauxclick: (e) => e.preventDefault() }, "Download");
    const mime = String(a.mime || "");
    const kind = previewable(mime) ? "" : mime.startsWith("image/") || /html|xml|javascript/.test(mime) ? " (download only)" : "";
    return h("tr", { dataset: { name: a.name } },
      h("td", { class: "mono name" }, a.name),
      h("td", { class: "nowrap" }, fmtBytes(a.bytes)),
      h("td", { class: "mono" }, mime, kind ? h("span", { class: "muted" }, kind) : null),
      h("td", { class: "mono nowrap", title: a.sha256 }, String(a.sha256 || "").slice(0, 12)),
      h("td", {}, link, " ", status));
  });
  const kids = [];
  if (list.length) {
    kids.push(h("div", { class: "scroll-x" }, h("table", { class: "artifacts" },
      h("thead", {}, h("tr", {}, ["name", "size", "media type", "sha256", "download"].map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows))));
  } else kids.push(h("p", { class: "muted small" }, "No artifacts were collected."));
  if (unlisted) kids.push(h("p", { class: "muted small" }, unlisted + " more artifacts were collected (counted, not listed)"));
  if (access && list.length) kids.push(h("p", { class: "muted small access-note" }, access));
  if (truncated.length || refused) {
    const n = refused || truncated.length;
    kids.push(h("details", { class: "dropped" }, h("summary", {}, n + (n === 1 ? " file of /workspace/out was" : " files of /workspace/out were") + " not collected"),
      h("ul", {}, truncated.map((d) => h("li", {}, h("code", {}, d.name), ": " + d.reason)))));
  }
  kids.push(previews);
  const el = h("section", { id, class: "artifacts-box", "aria-label": "Artifacts" }, kids);
  if (!access) showPreviews(list, execID, tenant, previews);
  return el;
}

// showPreviews draws the images one after the other (each fetch is one of
// the tenant's result readers): from the envelope's inline bytes when it
// has them, else from the route.
async function showPreviews(list, execID, tenant, box) {
  const imgs = list.filter((a) => previewable(a.mime));
  for (const [i, a] of imgs.entries()) {
    const fig = h("figure", { class: "preview", dataset: { name: a.name } });
    const cap = h("figcaption", { class: "muted small" }, a.name);
    box.append(fig);
    if (i >= MAX_PREVIEWS) { fig.append(cap, h("p", { class: "muted small" }, "not previewed: the first " + MAX_PREVIEWS + " images are")); continue; }
    if (a.bytes > MAX_PREVIEW_BYTES) { fig.append(cap, h("p", { class: "muted small" }, "not previewed: larger than " + fmtBytes(MAX_PREVIEW_BYTES))); continue; }
    let bytes;
    if (typeof a.base64 === "string") {
      try { bytes = fromBase64(a.base64); } catch { bytes = null; }
    } else {
      let r;
      try { r = await fetchArtifact(artifactPath(execID, a.name, tenant)); } catch (e) { r = { ok: false, message: e.message }; }
      if (!r.ok) { fig.append(cap, h("p", { class: "muted small" }, "not previewed: " + r.message)); continue; }
      bytes = r.bytes;
    }
    if (!bytes || !signatureOK(a.mime, bytes)) {
      fig.append(cap, h("p", { class: "muted small" }, "not previewed: the bytes are not " + a.mime));
      continue;
    }
    const url = URL.createObjectURL(new Blob([bytes], { type: a.mime }));
    const img = h("img", { src: url, alt: "preview of " + a.name, decoding: "async" });
    const done = () => URL.revokeObjectURL(url);
    img.addEventListener("load", () => { img.dataset.loaded = "true"; done(); }, { once: true });
    img.addEventListener("error", () => { fig.replaceChildren(cap, h("p", { class: "muted small" }, "not previewed: the image could not be decoded")); done(); }, { once: true });
    fig.append(img, cap);
  }
}
