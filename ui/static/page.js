// The page's own script: what inline handlers did before the Content-Security-Policy
// (ui/security.py) allowed scripts from /static only. A <select data-submit-on-change>
// submits its form when changed (the archive's reason filter).
document.addEventListener("change", (event) => {
  const field = event.target;
  if (field instanceof HTMLSelectElement && field.hasAttribute("data-submit-on-change")) {
    field.form.requestSubmit();
  }
});
