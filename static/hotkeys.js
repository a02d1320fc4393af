<script>
/* capscope annotate shortcuts: each key clicks a button of the page (by elem_id).
   Keys typed into text fields are left alone. */
(() => {
  const keys = {
    n: "cs-next", b: "cs-previous", s: "cs-submit", Enter: "cs-submit", k: "cs-skip",
    u: "cs-undo", z: "cs-undo", p: "cs-prelabels", g: "cs-guidelines",
    a: "cs-add-region", Escape: "cs-drop-region",
  };
  // Review: the same keys where they mean the same (regions, undo, skip, next, s/Enter to decide)
  const reviewKeys = {
    n: "cs-review-next", k: "cs-review-skip", u: "cs-review-undo", z: "cs-review-undo",
    s: "cs-review-submit", Enter: "cs-review-submit", a: "cs-review-accept", c: "cs-review-correct",
    r: "cs-review-return",
  };
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    // keys typed into a field are text; a focused radio button or checkbox (a mode just picked) still takes them
    const choice = target.tagName === "INPUT" && /^(radio|checkbox)$/.test(target.type);
    if ((/INPUT|TEXTAREA|SELECT/.test(target.tagName) && !choice) || target.isContentEditable) return;
    if (choice && (event.key === "Enter" || event.key === " ")) return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const shown = (selector) => { const tab = document.querySelector(selector); return tab && tab.offsetParent !== null; };
    const reviewing = shown("#cs-review");
    if (!reviewing && !shown("#cs-annotate")) return;  // only on the Annotate and Review tabs
    // Enter on a focused word or button is that element's own action, not "submit"
    if (event.key === "Enter" && target.closest("[role=button], button, a")) return;
    let id = (reviewing ? reviewKeys : keys)[event.key];
    if (!id && /^[0-9]$/.test(event.key)) {
      id = (reviewing ? "cs-review-region-" : "cs-region-") + (event.key === "0" ? 10 : +event.key);
    }
    if (id === "cs-review-return") {  // sending back needs a comment: an empty box takes the focus first
      const box = document.querySelector("#cs-review-comment textarea");
      if (box && !box.value.trim()) { event.preventDefault(); box.focus(); return; }
    }
    const button = id && document.getElementById(id);
    if (!button) return;
    event.preventDefault();
    const clickable = button.matches("button, input") ? button : button.querySelector("button, input");
    (clickable || button).click();
  });
  // Inspect: once a caption's text stops changing for 250 ms, the rest of its row is scored (its hidden
  // button is clicked). Typing, pasting, dropping and tools that insert text all fire "input". Here, not
  // in an event's js=, so that the page's Content-Security-Policy needs no eval.
  const pauses = {};
  const typed = new WeakMap();  // each caption box's text as its last input event left it
  document.addEventListener("input", (event) => {
    const caption = event.target.closest && event.target.closest("#cs-caption-a, #cs-caption-b");
    if (!caption) return;
    const rest = caption.id.replace("cs-caption-", "cs-rest-");
    clearTimeout(pauses[rest]);
    pauses[rest] = setTimeout(() => document.getElementById(rest)?.click(), 250);
    typed.set(event.target, event.target.value);
  }, true);
  // a tool that sets the text and fires only "change" (no "input") would leave the page's value, and the
  // scoring, behind the box: it is told as an input; a plain blur after typing (nothing new) is not
  document.addEventListener("change", (event) => {
    const box = event.target;
    if (!(box.closest && box.closest("#cs-caption-a, #cs-caption-b")) || typed.get(box) === box.value) return;
    box.dispatchEvent(new Event("input", {bubbles: true}));
  }, true);
})();
</script>
