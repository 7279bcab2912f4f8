// The one function of js-yaml (a pinned dev dependency) test/drift.test.ts uses.
declare module "js-yaml" {
  export function load(text: string): unknown;
}
