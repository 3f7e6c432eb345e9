() => {
  // Step-by-step tab: keys 1-9 click the n-th candidate button, unless the user is typing
  // or the tab is hidden (a hidden button has no offsetParent).
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || !/^[1-9]$/.test(event.key)) return;
    const target = event.target;
    const typing = target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
    if (typing) return;
    const button = document.getElementById(`step-cand-${event.key}`);
    if (button && button.offsetParent !== null) {
      event.preventDefault();
      button.click();
    }
  });
}
