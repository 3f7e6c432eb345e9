() => {
  // A token's card (playground/ui/token_html.py) opens inside the window: below its token when it
  // fits, else above it, else on the roomier side with its own scrollbar; never past the left or
  // right edge. It is fixed to the window, so no scrolling box clips it (the step text on stage,
  // a long chat answer) and the page never has to scroll to reach its last button.
  const MARGIN = 8;
  let current = null; // the token whose card is open

  const cardOf = (tok) => tok?.querySelector(":scope > .tok-card");
  const isOpen = (card) => card && getComputedStyle(card).display !== "none";

  const place = (tok) => {
    const card = cardOf(tok);
    if (!isOpen(card)) return;
    Object.assign(card.style, { position: "fixed", maxHeight: "none", top: "0px", left: "0px" });
    // A token that wraps has a box per line: the card opens under its last line or over its first.
    const lines = tok.getClientRects();
    const first = lines[0] || tok.getBoundingClientRect();
    const last = lines[lines.length - 1] || first;
    const height = card.offsetHeight;
    const width = card.offsetWidth;
    const below = window.innerHeight - last.bottom - MARGIN;
    const above = first.top - MARGIN;
    const up = height > below && above > below;
    // Touch the token (1 px overlap): the pointer moves onto the card without leaving the token.
    const top = up ? first.top + 1 - Math.min(height, above) : last.bottom - 1;
    const room = up ? above : below;
    card.style.maxHeight = height > room ? `${Math.max(80, room)}px` : "none";
    const left = Math.min(Math.max(MARGIN, (up ? first : last).left), window.innerWidth - width - MARGIN);
    Object.assign(card.style, { top: `${Math.round(top)}px`, left: `${Math.round(Math.max(MARGIN, left))}px` });
  };

  const open = (event) => {
    const tok = event.target.closest?.(".tok");
    if (!tok || !cardOf(tok) || tok.contains(event.relatedTarget)) return; // moved within the token
    current = tok;
    place(tok);
    requestAnimationFrame(() => place(tok)); // after the :hover or :focus style has applied
  };
  document.addEventListener("mouseover", open, true);
  document.addEventListener("focusin", open, true);
  const again = (event) => {
    const inside = event.target instanceof Node && current?.contains(event.target);
    if (current?.isConnected && !inside) place(current); // not the card's own scroll
  };
  window.addEventListener("scroll", again, { capture: true, passive: true });
  window.addEventListener("resize", again);
}
