() => {
  // The page's language (playground/ui/i18n): ?lang= first, then the browser's languages, then
  // English. Gradio translates our static text (launch(i18n=...)) by its locale, which it takes from
  // the browser at start: here it is set to the page's language, on load and when the header's
  // switch changes it (Gradio's own strings follow). ?lang= in the address tells the server the
  // language of every later request (server-built text, toasts, plots) and keeps it for a reload.
  const { fallback, languages, strings } = window.playgroundI18n;
  const known = (tag) => {
    const code = String(tag || "").trim().replace("_", "-").split("-")[0].toLowerCase();
    return code in languages ? code : null;
  };
  const asked = () => known(new URLSearchParams(location.search).get("lang"));
  let current = asked() || [...(navigator.languages || []), navigator.language].map(known).find(Boolean) || fallback;

  window.playgroundLanguage = () => current;
  // The browser's own text (static/*.js) in the page's language: keys "js.*" of the string tables.
  window.playgroundT = (key) => strings[current]?.[key] ?? strings[fallback]?.[key] ?? key;

  // Gradio's i18n store lives in its "core" module; importing the URL the page loaded it from gives
  // that same module (tests/test_i18n_browser.py fails if a Gradio upgrade moves it).
  const gradioCore = () => {
    const url = performance.getEntriesByType("resource").map((entry) => entry.name)
      .find((name) => /\/assets\/core-[^/]*\.js$/.test(name));
    return url ? import(url) : Promise.reject(new Error("Gradio's core module was not found"));
  };
  const apply = async () => {
    document.documentElement.lang = languages[current].locale;
    document.title = window.playgroundT("js.title");
    try {
      (await gradioCore()).changeLocale(languages[current].locale);
    } catch (error) {
      console.warn("playground: the page's language could not be set in Gradio", error);
    }
    window.dispatchEvent(new CustomEvent("playground-language", { detail: current }));
  };

  // Gradio 6 titles a toast by its type ("Warning", "Error"), not by the title the server passes:
  // each toast's title in the page's language, when a toast appears and when the language changes.
  const toastTitles = { error: "js.toast.error", warning: "js.toast.warning", info: "js.toast.info", success: "js.toast.success" };
  const titleToasts = () => {
    for (const title of document.querySelectorAll(".toast-title")) {
      const type = Object.keys(toastTitles).find((name) => title.classList.contains(name));
      const said = type && window.playgroundT(toastTitles[type]);
      for (const node of type ? title.childNodes : []) {
        if (node.nodeType === Node.TEXT_NODE && node.textContent.trim() && node.textContent.trim() !== said) {
          node.textContent = `${said} `;
        }
      }
    }
  };
  const isToast = (node) => node.nodeType === Node.ELEMENT_NODE
    && (node.matches(".toast-body, .toast-title") || node.querySelector(".toast-title") !== null);
  new MutationObserver((records) => {
    if (records.some((record) => [...record.addedNodes].some(isToast))) titleToasts();
  }).observe(document.body, { childList: true, subtree: true });
  window.addEventListener("playground-language", titleToasts);

  window.playgroundSetLanguage = (code) => {
    current = known(code) || fallback;
    const url = new URL(location.href);
    url.searchParams.set("lang", current);
    history.replaceState(history.state, "", url);
    apply();
    return current;
  };
  apply();
}
