// The code editor: a transparent <textarea> over a highlighted <pre>, with
// a line-number gutter. The tokenizer is a small hand-written one for
// Python, JavaScript and TypeScript: keywords, strings, numbers, comments,
// decorators, builtins and called names. It only colours; it never has to
// be right about the language.

const PY_KW = new Set(("False None True and as assert async await break class continue def del elif else except finally " +
  "for from global if import in is lambda nonlocal not or pass raise return try while with yield match case").split(" "));
const PY_BI = new Set("print len range dict list set tuple str int float bool open isinstance enumerate zip map filter sorted sum min max abs any all repr type super self".split(" "));
const JS_KW = new Set(("async await break case catch class const continue debugger default delete do else export extends false finally for " +
  "function if import in instanceof let new null return super switch this throw true try typeof undefined var void while with yield of").split(" "));
const JS_BI = new Set("console JSON Math Object Array String Number Promise Date Error fetch".split(" "));
const TS_KW = new Set([...JS_KW, ..."type interface enum implements private public protected readonly declare namespace abstract as satisfies keyof is infer".split(" ")]);
const TS_BI = new Set([...JS_BI, ..."string number boolean unknown never any void object Record Partial Readonly Array".split(" ")]);

// tokenize splits src into [class, text] pairs ("" = plain).
export function tokenize(src, lang) {
  const py = lang === "python", ts = lang === "typescript";
  const kw = py ? PY_KW : ts ? TS_KW : JS_KW, bi = py ? PY_BI : ts ? TS_BI : JS_BI;
  const out = [];
  let i = 0;
  const push = (cls, s) => out.push([cls, s]);
  while (i < src.length) {
    const c = src[i], rest = src.slice(i);
    let m;
    if ((py && c === "#") || (!py && rest.startsWith("//"))) {
      const end = src.indexOf("\n", i);
      const j = end < 0 ? src.length : end;
      push("t-com", src.slice(i, j)); i = j; continue;
    }
    if (!py && rest.startsWith("/*")) {
      const end = src.indexOf("*/", i + 2);
      const j = end < 0 ? src.length : end + 2;
      push("t-com", src.slice(i, j)); i = j; continue;
    }
    if ((m = py ? /^([rRbBfFuU]{0,2})("""|''')/.exec(rest) : null)) {
      const q = m[2], end = src.indexOf(q, i + m[0].length);
      const j = end < 0 ? src.length : end + 3;
      push("t-str", src.slice(i, j)); i = j; continue;
    }
    if ((m = (py ? /^[rRbBfFuU]{0,2}(["'])/ : /^(["'`])/).exec(rest))) {
      const q = m[1];
      let j = i + m[0].length;
      while (j < src.length && src[j] !== q && (q === "`" || src[j] !== "\n")) j += src[j] === "\\" ? 2 : 1;
      j = Math.min(src.length, j + 1);
      push("t-str", src.slice(i, j)); i = j; continue;
    }
    if (py && c === "@" && (m = /^@[\w.]+/.exec(rest))) { push("t-dec", m[0]); i += m[0].length; continue; }
    if ((m = /^(0[xXoObB][\da-fA-F_]+|\d[\d_]*\.?[\d_]*(?:[eE][+-]?\d+)?j?)/.exec(rest))) { push("t-num", m[0]); i += m[0].length; continue; }
    if ((m = /^[A-Za-z_$][\w$]*/.exec(rest))) {
      const w = m[0];
      const call = /^\s*\(/.test(src.slice(i + w.length));
      push(kw.has(w) ? "t-kw" : bi.has(w) ? "t-bi" : call ? "t-fn" : "", w);
      i += w.length; continue;
    }
    push("", c); i++;
  }
  return out;
}

// Editor wires the textarea, the highlighted <pre> and the gutter.
export class Editor {
  constructor({ textarea, code, gutter, language }) {
    this.ta = textarea; this.code = code; this.gutter = gutter; this.language = language || (() => "python");
    this.errLine = 0;
    this.ta.addEventListener("input", () => { this.errLine = 0; this.render(); });
    this.ta.addEventListener("scroll", () => this.sync());
    this.ta.addEventListener("keydown", (e) => this.key(e));
    this.render();
  }
  get value() { return this.ta.value; }
  set value(v) { this.ta.value = v; this.render(); }

  // markError highlights line n (0: none) in the code and the gutter.
  markError(n) { this.errLine = n; this.render(); }

  // goto puts the caret at the start of line n and focuses the editor.
  goto(n) {
    const lines = this.ta.value.split("\n");
    let pos = 0;
    for (let i = 0; i < n - 1 && i < lines.length; i++) pos += lines[i].length + 1;
    this.ta.focus();
    this.ta.setSelectionRange(pos, pos);
    const lh = parseFloat(getComputedStyle(this.ta).lineHeight) || 19.5;
    this.ta.scrollTop = Math.max(0, (n - 3) * lh);
    this.sync();
  }

  key(e) {
    if (e.key === "Tab" && !e.ctrlKey && !e.altKey && !e.metaKey) {
      // Tab indents; Escape then Tab leaves the editor (keyboard users are not trapped).
      if (this.escaped) { this.escaped = false; return; }
      e.preventDefault();
      const { selectionStart: s, selectionEnd: end, value } = this.ta;
      this.ta.value = value.slice(0, s) + "    " + value.slice(end);
      this.ta.setSelectionRange(s + 4, s + 4);
      this.render();
    } else if (e.key === "Escape") {
      this.escaped = true;
    } else {
      this.escaped = false;
    }
  }

  render() {
    const src = this.ta.value;
    const lines = [[]];
    for (const [cls, text] of tokenize(src, this.language())) {
      const parts = text.split("\n");
      parts.forEach((p, k) => {
        if (k > 0) lines.push([]);
        if (p) lines[lines.length - 1].push([cls, p]);
      });
    }
    const frag = document.createDocumentFragment();
    lines.forEach((toks, idx) => {
      const line = document.createElement("span");
      line.className = "line" + (idx + 1 === this.errLine ? " err" : "");
      for (const [cls, p] of toks) {
        if (!cls) { line.appendChild(document.createTextNode(p)); continue; }
        const s = document.createElement("span");
        s.className = cls; s.textContent = p; line.appendChild(s);
      }
      if (!toks.length) line.appendChild(document.createTextNode("\u200b"));
      frag.appendChild(line);
    });
    this.code.replaceChildren(frag);
    const g = document.createDocumentFragment();
    for (let n = 1; n <= lines.length; n++) {
      const d = document.createElement("div");
      d.textContent = String(n);
      if (n === this.errLine) { d.className = "err"; d.title = "the error is on this line"; }
      d.dataset.line = String(n);
      g.appendChild(d);
    }
    this.gutter.replaceChildren(g);
    this.sync();
  }

  sync() {
    const pre = this.code.parentElement;
    pre.scrollTop = this.ta.scrollTop; pre.scrollLeft = this.ta.scrollLeft;
    this.gutter.scrollTop = this.ta.scrollTop;
  }
}
