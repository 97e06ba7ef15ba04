// memcore's page works without this script: every action is a plain HTML form. With it, a
// list gets a "select all" box, and forms marked data-confirm ask before they post.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const table = document.querySelector("table.memories");
  if (table) {
    const head = table.querySelector("thead th");
    const all = document.createElement("input");
    all.type = "checkbox";
    all.setAttribute("aria-label", "Select every memory on this page");
    all.addEventListener("change", () => {
      for (const box of table.querySelectorAll("tbody input[type=checkbox]")) {
        box.checked = all.checked;
      }
    });
    head.replaceChildren(all);
  }
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
});
