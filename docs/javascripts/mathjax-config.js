// MathJax 3 (installed from npm by `make assets`, never fetched at view time) renders the
// \( \) and \[ \] spans that pymdownx.arithmatex leaves in the page.
//
// MathJax scales each formula to the x-height of the text around it, measured when it typesets.
// Measured before the vendored Roboto has arrived, that is the x-height of whatever font the
// machine substitutes, and the page's layout then depends on the installed fonts (the browser
// check caught it with late font files). So typeset only once the text's faces are loaded.
const textFaces = ["300 1em Roboto", "400 1em Roboto", "italic 400 1em Roboto", "700 1em Roboto"];
const facesLoaded = () => Promise.all(textFaces.map((f) => document.fonts.load(f, "x")))
  .then(() => document.fonts.ready);
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
  svg: { fontCache: "global" },
  startup: { pageReady: () => facesLoaded().then(() => MathJax.startup.defaultPageReady()) },
};
// Material's instant navigation swaps pages without reloading: typeset each new page.
if (typeof document$ !== "undefined") {
  document$.subscribe(() => {
    if (window.MathJax.typesetPromise) facesLoaded().then(() => MathJax.typesetPromise());
  });
}
