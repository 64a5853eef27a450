// Parses YAML files with the `yaml` package (pinned in package.json; YAML 1.2, duplicate keys
// and other errors fatal) and prints each as one line of JSON: {"file", "doc"} or {"file",
// "errors": [...]}. tests/py/check_workflow.py checks the GitHub Actions workflow it reads.
//
// usage: node workflow_parse.mjs FILE...
import fs from 'node:fs';
import YAML from 'yaml';

for (const file of process.argv.slice(2)) {
  const doc = YAML.parseDocument(fs.readFileSync(file, 'utf8'), { uniqueKeys: true, strict: true });
  const errors = [...doc.errors, ...doc.warnings].map((e) => e.message);
  process.stdout.write(JSON.stringify(errors.length ? { file, errors } : { file, doc: doc.toJS() }) + '\n');
}
