// memcore's page: edit, forget and restore a memory through the JSON API (the same routes,
// token and checks as any client), each after a confirmation. Everything else is plain HTML.
"use strict";

async function call(method, path, body) {
  const options = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new Error((data.error && data.error.message) || response.statusText);
  }
  return data;
}

function say(section, text, failed) {
  const out = section.querySelector(".outcome");
  if (out) {
    out.textContent = text;
    out.classList.toggle("error", Boolean(failed));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const section = document.querySelector("section.memory");
  if (section) {
    const id = encodeURIComponent(section.dataset.id);
    const edit = section.querySelector("form[data-action=edit]");
    if (edit) {
      edit.addEventListener("submit", async (event) => {
        event.preventDefault();
        const content = edit.querySelector("textarea").value;
        if (!window.confirm("Save this text? The Markdown file changes.")) return;
        try {
          await call("PUT", `/api/memories/${id}`, { content });
          window.location.reload();
        } catch (error) {
          say(section, error.message, true);
        }
      });
    }
    for (const button of section.querySelectorAll("button[data-action]")) {
      button.addEventListener("click", async () => {
        const action = button.dataset.action;
        const question = action === "forget"
          ? "Forget this memory? It leaves the Markdown; its history keeps it and Restore brings it back."
          : "Restore this memory to its file?";
        if (!window.confirm(question)) return;
        try {
          if (action === "forget") await call("DELETE", `/api/memories/${id}`);
          else await call("POST", `/api/memories/${id}/restore`);
          window.location.reload();
        } catch (error) {
          say(section, error.message, true);
        }
      });
    }
  }
  const login = document.querySelector("form[data-action=login]");
  if (login) {
    login.addEventListener("submit", (event) => {
      event.preventDefault();
      const token = login.querySelector("input").value;
      document.cookie = `memcore_token=${encodeURIComponent(token)}; path=/; SameSite=Strict`;
      window.location.href = "/";
    });
  }
});
