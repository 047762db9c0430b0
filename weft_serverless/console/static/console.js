// The little the console needs beyond htmx: check a JSON editor before it is sent, and ask
// again, saying why, before a signal the run does not wait for is sent.
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
  const warning = form.querySelector(".name-warning:not([hidden])");
  if (warning) {
    event.preventDefault();
    if (window.confirm(warning.textContent + "\n\nSend it anyway?")) event.detail.issueRequest(true);
  }
});

// A name field that knows what the run waits for (data-waits) warns on any other name: a
// signal nobody waits for is kept, and a typo waits for ever.
function checkWaitedName(input) {
  const warning = input.form && input.form.querySelector(".name-warning");
  if (!warning || input.dataset.waits === undefined) return;
  const waits = JSON.parse(input.dataset.waits);
  const name = input.value.trim();
  const known = name === "" || waits.includes(name);
  warning.hidden = known;
  warning.textContent = known ? "" : "The run does not wait for signal \u201c" + name +
    "\u201d now (it waits for " + (waits.join(", ") || "no signal") +
    "); it is kept until the run waits for it, which may be never.";
}
document.addEventListener("input", (event) => {
  if (event.target.matches("input[data-waits]")) checkWaitedName(event.target);
});

// A chip of what the run waits for fills its form's name field.
document.addEventListener("click", (event) => {
  const chip = event.target.closest("button[data-fill]");
  if (!chip) return;
  const input = chip.form.querySelector(`[data-testid="${chip.dataset.fill}"]`);
  input.value = chip.dataset.value;
  checkWaitedName(input);
  input.focus();
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

// A hidden tab does not refresh: a refresh nobody sees still reads every status entry of the
// store (the counts). Shown again, each live part refreshes at once.
document.addEventListener("htmx:beforeRequest", (event) => {
  if (document.hidden && event.detail.elt.hasAttribute("data-live")) event.preventDefault();
});
document.addEventListener("visibilitychange", () => {
  if (document.hidden) return;
  for (const live of document.querySelectorAll("[data-live]")) htmx.trigger(live, "shown");
});
