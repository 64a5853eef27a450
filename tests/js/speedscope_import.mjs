// Imports files with speedscope's own importer (the npm package's bundle, pinned in
// package.json) and prints what speedscope made of them, one JSON object per file:
//   {"file", "name", "profiles": [{"name", "unit", "total", "frames": [frame names]}]}
// speedscope ships as a browser bundle, so this runs it in a bare VM context with just what its
// module-level code reads (location, navigator) and takes the importer module from it (the
// bundle awaits it as `(await X).importProfileGroupFromText`); the app itself is never started.
//
// usage: node speedscope_import.mjs FILE...
import fs from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = path.join(here, 'node_modules', 'speedscope', 'dist', 'release');
const bundle = fs.readdirSync(dir).find((f) => /^speedscope-.*\.js$/.test(f));
if (!bundle) throw new Error(`no speedscope bundle in ${dir} (run: npm ci --prefix tests/js)`);
let src = fs.readFileSync(path.join(dir, bundle), 'utf8');
const importer = src.match(/\(await (\w+)\)\.importProfileGroupFromText/);
const appStart = src.lastIndexOf('console.log(`speedscope v');
const end = src.lastIndexOf('})();');
if (!importer || appStart < 0 || end < appStart) throw new Error('unexpected speedscope bundle layout');
src = src.slice(0, appStart) + `globalThis.__memtraceImporter = ${importer[1]};` + src.slice(end);

const ctx = {
  console: { log() {}, warn() {}, error: console.error, info() {} },
  setTimeout, clearTimeout, TextDecoder, TextEncoder, URL, atob, btoa,
  location: { hash: '', search: '', href: 'file:///index.html', protocol: 'file:' },
  navigator: { userAgent: 'node', platform: 'node' },
};
ctx.globalThis = ctx;
ctx.window = ctx;
ctx.self = ctx;
vm.createContext(ctx);
vm.runInContext(src, ctx, { filename: bundle });
const mod = await ctx.__memtraceImporter;

for (const file of process.argv.slice(2)) {
  const group = await mod.importProfileGroupFromText(path.basename(file), fs.readFileSync(file, 'utf8'));
  if (!group) throw new Error(`${file}: speedscope did not recognise the format`);
  const profiles = group.profiles.map((p) => {
    const frames = new Set();
    p.forEachFrame((f) => frames.add(f.name));
    return { name: p.getName(), unit: p.getWeightUnit(), total: p.getTotalWeight(), frames: [...frames] };
  });
  console.log(JSON.stringify({ file, name: group.name, profiles }));
}
