() => {
  // Escape closes a pinned token card (a click focuses a token to pin its card).
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.activeElement?.classList.contains("tok")) {
      document.activeElement.blur();
    }
  });
  // A token card's buttons in a chat answer are plain HTML, not Gradio components: fill the
  // hidden number inputs, then click the hidden button whose event runs the handler.
  const setNumber = (id, value) => {
    const input = document.querySelector(`#${id} input`);
    if (!input) return false;
    input.value = String(value);
    input.dispatchEvent(new Event("input", { bubbles: true }));
    input.dispatchEvent(new Event("change", { bubbles: true }));
    return true;
  };
  const press = (id) => setTimeout(() => document.getElementById(id)?.click(), 60);
  document.addEventListener("click", (event) => {
    const alt = event.target.closest?.(".tok-alt");
    if (alt) {
      event.preventDefault();
      if (setNumber("chat-fork-position", alt.dataset.pos) && setNumber("chat-fork-token", alt.dataset.token)) {
        press("chat-fork-button");
      }
      document.activeElement?.blur?.();
      return;
    }
    const open = event.target.closest?.(".tok-open");
    if (open) {
      event.preventDefault();
      if (setNumber("chat-open-position", open.dataset.pos)) press("chat-open-step-button");
      document.activeElement?.blur?.();
    }
  });
}
