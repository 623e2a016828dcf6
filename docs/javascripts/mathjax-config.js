// MathJax 3 (installed from npm by `make assets`, never fetched at view time) renders the
// \( \) and \[ \] spans that pymdownx.arithmatex leaves in the page.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
  svg: { fontCache: "global" },
};
// Material's instant navigation swaps pages without reloading: typeset each new page.
if (typeof document$ !== "undefined") {
  document$.subscribe(() => { if (window.MathJax.typesetPromise) MathJax.typesetPromise(); });
}
