// Builds the console into dist/ (or $OUT): one JS bundle and one CSS file,
// both named by content hash, and index.html pointing at them. The output
// depends only on the sources and the pinned esbuild, so `make test` can
// rebuild it and compare byte for byte with the committed dist/.
import * as esbuild from 'esbuild';
import { readFileSync, writeFileSync, rmSync, mkdirSync } from 'node:fs';
import { dirname, join, basename } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.env.OUT || join(here, 'dist');

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

const result = await esbuild.build({
  absWorkingDir: here,
  entryPoints: { app: 'src/main.jsx' },
  bundle: true,
  minify: true,
  format: 'esm',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  target: ['chrome120', 'firefox120', 'safari16'],
  legalComments: 'none',
  entryNames: '[name].[hash]',
  outdir: out,
  metafile: true,
  logLevel: 'warning',
});

// The entry's JS and the CSS it imports are the only outputs.
const files = Object.keys(result.metafile.outputs).map((f) => basename(f));
const js = files.find((f) => f.endsWith('.js'));
const css = files.find((f) => f.endsWith('.css'));
if (!js || !css || files.length !== 2) {
  throw new Error(`unexpected build outputs: ${files.join(', ')}`);
}
const html = readFileSync(join(here, 'src', 'index.html'), 'utf8')
  .replace('%APP_JS%', js)
  .replace('%APP_CSS%', css);
writeFileSync(join(out, 'index.html'), html);
console.log(`console built: ${out} (${files.join(', ')}, index.html)`);
