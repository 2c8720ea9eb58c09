// Module hooks for unit tests: @preact/signals resolves to stub/signals.mjs.
export async function resolve(specifier, context, next) {
  if (specifier === '@preact/signals') return { url: new URL('./signals.mjs', import.meta.url).href, shortCircuit: true };
  return next(specifier, context);
}
