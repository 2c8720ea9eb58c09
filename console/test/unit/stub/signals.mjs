// A stand-in for @preact/signals in unit tests (no npm packages needed):
// the sources under test only read and write .value.
export function signal(value) {
  return { value };
}
