// Renders Markdown files with markdown-it (pinned in package.json) as GitHub would read them:
// GFM tables and strikethrough (markdown-it's defaults), raw HTML allowed (GitHub keeps
// <details>, <summary> and <sub>), no typographer, no linkify. Prints one JSON object per file:
//   {"file", "html"}
// tests/py/check_markdown.py looks at the HTML.
//
// usage: node markdown_render.mjs FILE...
import fs from 'node:fs';
import MarkdownIt from 'markdown-it';

const md = new MarkdownIt({ html: true, linkify: false, typographer: false });
for (const file of process.argv.slice(2)) {
  const html = md.render(fs.readFileSync(file, 'utf8'));
  process.stdout.write(JSON.stringify({ file, html }) + '\n');
}
