// The resolve hook of sdk-alias.mjs: `stripe` and `stripe/…` become `stripe-lowest` and
// `stripe-lowest/…`, resolved from the importer as any other package.
/** @type {Record<string, string>} */
let aliases = {};

export function initialize(data) {
  aliases = data ?? {};
}

export async function resolve(specifier, context, next) {
  for (const [name, alias] of Object.entries(aliases)) {
    if (specifier === name || specifier.startsWith(`${name}/`)) {
      return next(alias + specifier.slice(name.length), context);
    }
  }
  return next(specifier, context);
}
