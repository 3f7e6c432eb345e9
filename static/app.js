() => {
  // Escape closes a pinned token card (a click focuses a token to pin its card).
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.activeElement?.classList.contains("tok")) {
      document.activeElement.blur();
    }
  });
  // One-line tooltips for buttons (Gradio buttons take no title): what the button teaches, in the
  // page's language (keys of the string tables, static/i18n.js).
  const tips = {
    "step-open-lens": "js.tip.open_lens",
    "step-continue-chat": "js.tip.continue_chat",
  };
  const addTips = () => {
    for (const [id, key] of Object.entries(tips)) {
      const el = document.getElementById(id);
      const tip = window.playgroundT(key);
      if (el && el.title !== tip) el.title = tip;
    }
  };
  window.addEventListener("playground-language", addTips);
  // The model picker's whole choice in its tooltip (a long one ends in "…": static/models.css), read
  // when the pointer or the focus comes to it.
  const pickerTip = (event) => {
    const input = event.target.closest?.("#model-picker")?.querySelector("input");
    if (input && input.title !== input.value) input.title = input.value;
  };
  document.addEventListener("pointerover", pickerTip);
  document.addEventListener("focusin", pickerTip);
  // On stage the step text and a chat answer are scrolling boxes (static/stage.css), the answer's
  // down to the window's bottom: each new text (a new element on every update) opens at its end, and
  // stays there while the page around it changes (the status line above grows, the box shrinks); a
  // hand scroll away from the end stays where it is.
  const fitChatAnswer = () => {
    const stream = document.querySelector("body.presenter #chat-tokens .token-stream");
    if (!stream?.offsetParent) return;
    const top = stream.getBoundingClientRect().top + window.scrollY;
    const room = Math.max(96, Math.floor(window.innerHeight - top - 12));
    document.getElementById("chat-tokens").style.setProperty("--stage-room", `${room}px`);
  };
  const atEnd = (box) => box.scrollHeight - box.scrollTop - box.clientHeight < 4;
  const showNewestTokens = () => {
    fitChatAnswer();
    for (const stream of document.querySelectorAll("body.presenter :is(#step-text, #chat-tokens) .token-stream")) {
      if (!stream.dataset.scrolled) {
        stream.dataset.scrolled = "end";
        stream.addEventListener("scroll", () => {
          stream.dataset.scrolled = atEnd(stream) ? "end" : "hand";
        }, { passive: true });
      }
      if (stream.dataset.scrolled === "end") stream.scrollTop = stream.scrollHeight;
    }
  };
  new MutationObserver(() => {
    addTips();
    showNewestTokens();
  }).observe(document.body, { childList: true, subtree: true });
  window.addEventListener("resize", showNewestTokens);
  new MutationObserver(showNewestTokens).observe(document.body, { attributes: true, attributeFilter: ["class"] });

  // "Copy link" shows its link over the page (static/stage.css) until a click elsewhere, Escape, or
  // LINK_SECONDS without the pointer or the focus on it (playground/ui/app.py calls this).
  const LINK_SECONDS = 8;
  let linkTimer = null;
  const linkBox = () => document.getElementById("share-link");
  const closeLink = () => {
    clearInterval(linkTimer);
    linkBox()?.classList.add("share-closed");
  };
  window.playgroundShowLink = () => {
    linkBox()?.classList.remove("share-closed");
    let idle = 0;
    clearInterval(linkTimer);
    linkTimer = setInterval(() => {
      const box = linkBox();
      idle = box?.matches(":hover, :focus-within") ? 0 : idle + 1;
      if (idle >= LINK_SECONDS) closeLink();
    }, 1000);
  };
  document.addEventListener("pointerdown", (event) => {
    const box = linkBox();
    if (box && !box.contains(event.target) && !event.target.closest?.("#copy-link")) closeLink();
  }, true);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") closeLink();
  });
}
