// The API reference, rendered from this daemon's own OpenAPI document with
// nothing from elsewhere: every operation with its parameters, body and
// answers. Text is set with textContent only.
"use strict";

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function schemaName(schema) {
  if (!schema) return "";
  if (schema.$ref) return schema.$ref.split("/").pop();
  if (schema.type === "array") return `${schemaName(schema.items)}[]`;
  if (schema.oneOf || schema.anyOf) return (schema.oneOf || schema.anyOf).map(schemaName).join(" | ");
  if (Array.isArray(schema.type)) return schema.type.join(" | ");
  return schema.type || "object";
}

function renderSchema(name, schema) {
  const article = el("article");
  article.id = `schema-${name}`;
  article.appendChild(el("h3", name));
  if (schema.description) article.appendChild(el("p", schema.description));
  if (schema.enum) article.appendChild(el("p", `One of: ${schema.enum.join(", ")}`));
  const properties = schema.properties || {};
  if (Object.keys(properties).length) {
    const list = el("dl");
    const required = new Set(schema.required || []);
    for (const [field, spec] of Object.entries(properties)) {
      list.appendChild(el("dt", `${field}${required.has(field) ? "" : "?"}`));
      list.appendChild(el("dd", `${schemaName(spec)}${spec.description ? ` — ${spec.description}` : ""}`));
    }
    article.appendChild(list);
  }
  return article;
}

function renderOperation(method, path, op) {
  const article = el("article");
  const title = el("h3");
  title.append(el("span", method.toUpperCase(), `method ${method}`), " ", el("code", path));
  article.appendChild(title);
  if (op.summary) article.appendChild(el("p", op.summary, "summary"));
  if (op.description) article.appendChild(el("p", op.description));
  if (op.parameters && op.parameters.length) {
    article.appendChild(el("h4", "Parameters"));
    const list = el("dl");
    for (const p of op.parameters) {
      list.appendChild(el("dt", `${p.name} (${p.in}${p.required ? ", required" : ""})`));
      list.appendChild(el("dd", `${schemaName(p.schema)}${p.description ? ` — ${p.description}` : ""}`));
    }
    article.appendChild(list);
  }
  const body = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
  if (body) {
    article.appendChild(el("h4", "Body"));
    article.appendChild(el("p", `${schemaName(body.schema)}${op.requestBody.description ? ` — ${op.requestBody.description}` : ""}`));
  }
  article.appendChild(el("h4", "Answers"));
  const answers = el("dl");
  for (const [status, response] of Object.entries(op.responses || {})) {
    answers.appendChild(el("dt", status));
    answers.appendChild(el("dd", response.description || (response.$ref || "").split("/").pop()));
  }
  article.appendChild(answers);
  return article;
}

document.addEventListener("DOMContentLoaded", async () => {
  const main = document.getElementById("reference");
  const doc = await fetch("/api/v1/openapi.json").then((r) => r.json());
  main.appendChild(el("h2", `${doc.info.title} ${doc.info.version}`));
  if (doc.info.description) main.appendChild(el("pre", doc.info.description));
  const byTag = new Map();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const tag = (op.tags && op.tags[0]) || "other";
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push(renderOperation(method, path, op));
    }
  }
  for (const [tag, operations] of byTag) {
    const section = el("section");
    section.appendChild(el("h2", tag));
    section.append(...operations);
    main.appendChild(section);
  }
  const schemas = el("section");
  schemas.appendChild(el("h2", "Schemas"));
  for (const [name, schema] of Object.entries((doc.components && doc.components.schemas) || {})) {
    schemas.appendChild(renderSchema(name, schema));
  }
  main.appendChild(schemas);
  document.body.dataset.rendered = "true";
  document.body.dataset.ready = "docs";
});
