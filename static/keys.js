() => {
  // Keyboard control for talks, with a "?" help overlay. Keys act only when no text box has the
  // focus, and a key whose button is not on screen (another tab) does nothing.
  const HELP = [
    ["1 – 9", "Step by step: pick that candidate"],
    ["n  or  →", "Step by step: next token (a greedy step)"],
    ["s", "Step by step: sample the next token"],
    ["u  or  ←", "Step by step: undo"],
    ["[  and  ]", "previous / next tab"],
    ["p", "presenter mode on / off"],
    ["?", "this help"],
    ["Esc", "close this help, or a pinned token card"],
  ];
  let overlay = null;
  const toggleHelp = (show) => {
    if (!overlay) {
      overlay = document.createElement("div");
      overlay.id = "keys-help";
      overlay.setAttribute("role", "dialog");
      overlay.setAttribute("aria-label", "Keyboard shortcuts");
      const rows = HELP.map(([key, what]) => `<tr><td><kbd>${key}</kbd></td><td>${what}</td></tr>`).join("");
      overlay.innerHTML = `<div class="keys-help-box"><h3>Keyboard</h3><table>${rows}</table>` +
        `<p>Press <kbd>?</kbd> or <kbd>Esc</kbd> to close.</p></div>`;
      overlay.addEventListener("click", (event) => { if (event.target === overlay) toggleHelp(false); });
      document.body.appendChild(overlay);
    }
    const open = show ?? !overlay.classList.contains("open");
    overlay.classList.toggle("open", open);
  };
  window.playgroundToggleHelp = toggleHelp;

  const typing = (el) => el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName));
  const press = (id) => {
    const button = document.getElementById(id);
    if (!button || button.offsetParent === null) return false;  // hidden: its tab is not shown
    button.click();
    return true;
  };
  const switchTab = (delta) => {
    const tabs = [...document.querySelectorAll("[role=tab]")];
    const current = tabs.findIndex((tab) => tab.getAttribute("aria-selected") === "true");
    tabs[(current + delta + tabs.length) % tabs.length]?.click();
    return true;
  };
  const ACTIONS = {
    n: () => press("step-greedy"), ArrowRight: () => press("step-greedy"),
    s: () => press("step-sample"),
    u: () => press("step-undo"), ArrowLeft: () => press("step-undo"),
    "]": () => switchTab(1), "[": () => switchTab(-1),
    p: () => { window.playgroundTogglePresenter?.(); return true; },
    "?": () => { toggleHelp(); return true; },
  };
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      if (overlay?.classList.contains("open")) toggleHelp(false);
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const action = /^[1-9]$/.test(event.key) ? () => press(`step-cand-${event.key}`) : ACTIONS[event.key];
    if (action && action()) event.preventDefault();
  });
}
