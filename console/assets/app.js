// The console shell: sign-in, navigation by URL hash, and hiding the pages
// the token's roles cannot use. Hiding is a convenience only: the API
// refuses those calls anyway.

import { token, setToken, claims } from "./dom.js";
import { initPlayground } from "./playground.js";
import { initPolicy, loadQuotas, initRuns, searchRuns, initHealth, loadHealth } from "./pages.js";

// Which roles each page needs (the access table's grants for the routes it
// calls; health reads the public /readyz).
const PAGES = {
  playground: { roles: ["executor"], why: "runs tools through POST /v1/executions (or /v1/execute), which need the executor role" },
  policy: { roles: ["admin", "tenant-admin", "policy-author"], why: "calls POST /v1/admin/policy/evaluate (admin, tenant-admin or policy-author)" },
  quotas: { roles: ["admin"], why: "lists and edits every tenant's quota (admin only)" },
  runs: { roles: ["admin", "tenant-admin", "auditor"], why: "searches the audit log through GET /v1/admin/audit (admin, tenant-admin or auditor)" },
  health: { roles: null },
};

const $ = (id) => document.getElementById(id);
let me = null;
let inited = false;

function allowed(page) {
  const p = PAGES[page];
  return !!p && (!p.roles || p.roles.some((r) => me.roles.includes(r)));
}

function show(id) {
  for (const s of document.querySelectorAll("main > .page")) s.hidden = s.id !== id;
}

function route() {
  if (!me) { show("page-signin"); $("nav").hidden = true; $("who").hidden = true; $("token").focus(); return; }
  let page = location.hash.replace(/^#\/?/, "");
  if (!PAGES[page]) page = Object.keys(PAGES).find(allowed);
  for (const a of document.querySelectorAll("#nav a")) {
    a.hidden = !allowed(a.dataset.page);
    a.toggleAttribute("aria-current", false);
    if (a.dataset.page === page) a.setAttribute("aria-current", "page");
  }
  if (!allowed(page)) {
    $("denied-text").textContent = "This page " + PAGES[page].why + "; this token has roles [" + me.roles.join(", ") + "]. The API would refuse it as well.";
    show("page-denied");
    return;
  }
  show("page-" + page);
  if (page === "quotas") loadQuotas();
  if (page === "runs") searchRuns();
  if (page === "health") loadHealth();
}

function signIn(t) {
  const c = claims(t);
  if (c.exp && c.exp * 1000 < Date.now()) throw new Error("this token expired at " + new Date(c.exp * 1000).toISOString());
  if (!c.tenant) throw new Error("this token has no tenant_id claim");
  setToken(t);
  me = c;
  $("who-text").textContent = c.sub + " @ " + c.tenant + " · " + (c.roles.join(", ") || "no roles");
  $("nav").hidden = false;
  $("who").hidden = false;
  if (!inited) {
    inited = true;
    initPlayground(me);
    initPolicy(me);
    initRuns(me);
    initHealth();
  }
}

// signOut forgets the token and reloads, so nothing of the previous
// token's results stays on the page.
function signOut(reason) {
  setToken("");
  me = null;
  if (reason) sessionStorage.setItem("execgate.signout", reason);
  location.hash = "";
  location.reload();
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    try {
      signIn($("token").value.trim());
      $("token").value = "";
      $("signin-error").textContent = "";
      route();
      $("main").focus();
    } catch (err) { $("signin-error").textContent = "Not a usable token: " + err.message; }
  });
  $("signout").addEventListener("click", () => signOut());
  document.addEventListener("execgate:unauthenticated", (e) => {
    const msg = e.detail && e.detail.error ? e.detail.error.message : "the token was refused";
    signOut("Signed out: " + msg);
  });
  window.addEventListener("hashchange", route);
  const why = sessionStorage.getItem("execgate.signout");
  if (why) { sessionStorage.removeItem("execgate.signout"); $("signin-error").textContent = why; }
  if (token()) { try { signIn(token()); } catch (err) { setToken(""); $("signin-error").textContent = err.message; } }
  route();
});
