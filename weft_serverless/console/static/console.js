// The little the console needs beyond htmx: check a JSON editor before it is sent.
document.addEventListener("htmx:confirm", (event) => {
  const form = event.target.closest("form");
  if (!form) return;
  for (const editor of form.querySelectorAll("textarea[data-json]")) {
    const text = editor.value.trim();
    if (text === "") continue;
    try {
      JSON.parse(text);
      editor.setCustomValidity("");
    } catch (error) {
      editor.setCustomValidity("not JSON: " + error.message);
      editor.reportValidity();
      event.preventDefault();
      return;
    }
  }
});

// Editing a JSON editor withdraws its complaint: while a complaint stands the browser
// refuses to submit the form, so the corrected text would never reach the check above.
document.addEventListener("input", (event) => {
  if (event.target.matches("textarea[data-json]")) event.target.setCustomValidity("");
});

// A refused action answers 4xx with its outcome as HTML: show it where the operator clicked
// (htmx drops error answers by default).
document.addEventListener("htmx:beforeSwap", (event) => {
  const status = event.detail.xhr.status;
  if (status >= 400 && event.detail.xhr.responseText) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// Starting a run: picking a type fills the input with the workflows module's sample, if any.
document.addEventListener("change", (event) => {
  const select = event.target.closest("select[data-samples]");
  if (!select) return;
  const samples = JSON.parse(select.dataset.samples || "{}");
  const input = select.form.querySelector("textarea[name=input]");
  if (input && select.value in samples) input.value = JSON.stringify(samples[select.value], null, 2);
});
document.addEventListener("DOMContentLoaded", () => {
  for (const select of document.querySelectorAll("select[data-samples]")) {
    select.dispatchEvent(new Event("change", { bubbles: true }));
  }
});
