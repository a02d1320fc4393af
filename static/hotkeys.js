<script>
/* capscope annotate shortcuts: each key clicks a button of the page (by elem_id).
   Keys typed into text fields are left alone. */
(() => {
  const keys = {
    n: "cs-next", b: "cs-previous", s: "cs-submit", Enter: "cs-submit", k: "cs-skip",
    u: "cs-undo", z: "cs-undo", p: "cs-prelabels", g: "cs-guidelines",
    a: "cs-add-region", Escape: "cs-drop-region", m: "cs-next-mask",
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
  // A box by drag (Annotate's picture, Inspect's two overlays): press, drag, release draws a box prompt
  // for the segmenter. The box is drawn while dragging; on release it is written, in the served picture's
  // pixels (Gradio's own click mapping: the picture fitted, never enlarged, centred), into the tab's hidden
  // box field, whose change hands it to Python (Gradio 6 fires a Textbox's "input" on keys only). The click
  // that ends a drag is not a click on the picture.
  const boxFields = {"cs-annotate-image": "cs-annotate-box", "cs-overlay-a": "cs-inspect-box",
                     "cs-overlay-b": "cs-inspect-box"};
  const DRAG_MIN = 6;  // screen pixels before a press becomes a drag (a click wobbles less)
  let drag = null, swallowClick = false, drags = 0;
  const dragPicture = (target) => {
    const holder = target.closest && target.closest(Object.keys(boxFields).map((id) => "#" + id).join(", "));
    const img = holder && target.closest("img");
    return img && img.naturalWidth ? {holder, img} : null;
  };
  const fitted = (img) => {  // where the picture's pixels are on screen
    const r = img.getBoundingClientRect();
    const scale = Math.min(r.width / img.naturalWidth, r.height / img.naturalHeight, 1);
    const w = img.naturalWidth * scale, h = img.naturalHeight * scale;
    return {left: r.left + (r.width - w) / 2, top: r.top + (r.height - h) / 2, w, h, scale};
  };
  const clamp = (v, lo, hi) => Math.min(Math.max(v, lo), hi);
  const dragRect = (drag) => {
    const f = fitted(drag.img);
    const xs = [drag.x0, drag.x1].map((x) => clamp(x, f.left, f.left + f.w)).sort((a, b) => a - b);
    const ys = [drag.y0, drag.y1].map((y) => clamp(y, f.top, f.top + f.h)).sort((a, b) => a - b);
    return {f, xs, ys};
  };
  document.addEventListener("pointerdown", (event) => {
    if (event.button !== 0 || !event.isPrimary) return;
    const found = dragPicture(event.target);
    if (!found) return;
    event.preventDefault();  // no native image drag, no text selection
    drag = {...found, x0: event.clientX, y0: event.clientY, x1: event.clientX, y1: event.clientY, shown: null};
  }, true);
  document.addEventListener("pointermove", (event) => {
    if (!drag) return;
    drag.x1 = event.clientX; drag.y1 = event.clientY;
    if (!drag.shown && Math.hypot(drag.x1 - drag.x0, drag.y1 - drag.y0) < DRAG_MIN) return;
    if (!drag.shown) {
      drag.shown = document.createElement("div");
      drag.shown.id = "cs-drag-box";
      document.body.appendChild(drag.shown);
    }
    const {xs, ys} = dragRect(drag);
    Object.assign(drag.shown.style, {left: xs[0] + "px", top: ys[0] + "px", width: (xs[1] - xs[0]) + "px",
                                     height: (ys[1] - ys[0]) + "px"});
  }, true);
  const endDrag = (event) => {
    if (!drag) return;
    const ended = drag;
    drag = null;
    if (!ended.shown) return;  // a click: Gradio's own select takes it
    ended.shown.remove();
    swallowClick = true;  // the click this release fires next (at once, or not at all when it ended elsewhere)
    setTimeout(() => { swallowClick = false; }, 50);
    ended.x1 = event.clientX; ended.y1 = event.clientY;
    const {f, xs, ys} = dragRect(ended);
    const box = [(xs[0] - f.left) / f.scale, (ys[0] - f.top) / f.scale, (xs[1] - f.left) / f.scale,
                 (ys[1] - f.top) / f.scale].map((v) => Math.round(v * 10) / 10);
    if (event.type === "pointercancel" || box[2] - box[0] < 1 || box[3] - box[1] < 1) return;
    const field = document.querySelector("#" + boxFields[ended.holder.id] + " textarea, #" +
                                          boxFields[ended.holder.id] + " input");
    if (!field) return;
    drags += 1;  // the same box twice is still a new drag
    field.value = JSON.stringify({box, drag: drags});
    field.dispatchEvent(new Event("input", {bubbles: true}));
  };
  document.addEventListener("pointerup", endDrag, true);
  document.addEventListener("pointercancel", endDrag, true);
  document.addEventListener("click", (event) => {  // the click a drag ends with selects nothing
    if (swallowClick && dragPicture(event.target)) {
      swallowClick = false;
      event.stopImmediatePropagation();
      event.preventDefault();
    }
  }, true);
  document.addEventListener("dragstart", (event) => { if (dragPicture(event.target)) event.preventDefault(); }, true);
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
