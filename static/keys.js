() => {
  // Keyboard control for talks, with a "?" help overlay. Keys act only when no text box has the
  // focus, and a key whose button is not on screen (another tab) does nothing.
  // [keys, what they do (a key of the string tables: playground/ui/i18n, static/i18n.js)]
  const HELP = [
    ["1 – 9", "js.keys.pick"],
    ["n  or  →", "js.keys.next"],
    ["s", "js.keys.sample"],
    ["u  or  ←", "js.keys.undo"],
    ["[  and  ]", "js.keys.tabs"],
    ["p", "js.keys.presenter"],
    ["?", "js.keys.help"],
    ["Esc", "js.keys.escape"],
  ];
  const T = (key) => window.playgroundT(key);
  let overlay = null;
  // Its text in the page's language, written again when the language changes.
  const fill = () => {
    if (!overlay) return;
    overlay.setAttribute("aria-label", T("js.keys.label"));
    const rows = HELP.map(([key, what]) => `<tr><td><kbd>${key}</kbd></td><td>${T(what)}</td></tr>`).join("");
    overlay.innerHTML = `<div class="keys-help-box"><h3>${T("js.keys.title")}</h3><table>${rows}</table>` +
      `<p>${T("js.keys.close")}</p></div>`;
  };
  window.addEventListener("playground-language", fill);
  const toggleHelp = (show) => {
    if (!overlay) {
      overlay = document.createElement("div");
      overlay.id = "keys-help";
      overlay.setAttribute("role", "dialog");
      fill();
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
