() => {
  // Escape closes a pinned token card (a click focuses a token to pin its card).
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.activeElement?.classList.contains("tok")) {
      document.activeElement.blur();
    }
  });
}
