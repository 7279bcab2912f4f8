/// <reference types="node" />
// Writing a run's artifacts into a directory, safely (Client.saveArtifacts;
// Node, or a runtime with node:fs).
//
// The gateway collects only plain file names, but the client does not rely
// on it: a name with a slash, a backslash, a control character, "." or ".."
// is refused before anything is written. The directory is resolved once;
// each file is written to a new temporary name beside its own (O_CREAT |
// O_EXCL | O_NOFOLLOW) and renamed over the artifact's name, so a regular
// file of that name is replaced whole, and a symbolic link (or a directory,
// or anything but a regular file) already there is left alone: nothing is
// ever written through a link. The bytes are checked against the
// artifact's listed size (no more is read) and sha256 before the rename.

import type { components } from "./schema.js";
import { ExecgateError } from "./errors.js";

export type Artifact = components["schemas"]["Artifact"];

/** What artifact() reads at most by default: the platform's maximum of
 * limits.artifacts_bytes (64 MiB). */
export const DEFAULT_MAX_ARTIFACT_BYTES = 64 << 20;
const MAX_NAME_BYTES = 255;

/** Throws a TypeError unless name is a plain file name (the gateway's
 * rules for artifact names). */
export function checkArtifactName(name: string): void {
  if (typeof name !== "string" || name === "" || name === "." || name === "..") {
    throw new TypeError(`artifact name ${JSON.stringify(name)} is not a file name`);
  }
  if (new TextEncoder().encode(name).length > MAX_NAME_BYTES) {
    throw new TypeError(`artifact name ${JSON.stringify(name.slice(0, 40))}… is over ${MAX_NAME_BYTES} bytes`);
  }
  for (const ch of name) {
    const c = ch.codePointAt(0)!;
    if (ch === "/" || ch === "\\" || c < 0x20 || (c >= 0x7f && c < 0xa0)) {
      throw new TypeError(`artifact name ${JSON.stringify(name)} contains ${JSON.stringify(ch)}: not a plain file name`);
    }
  }
}

/** The bytes received for an artifact are not the ones its listing
 * declares (size or sha256): nothing is written. */
export class ArtifactMismatch extends ExecgateError {
  constructor(message: string) {
    super(message, { status: 0, errorType: "ArtifactMismatch" });
  }
}

/** Writes artifacts into one directory (made if missing). */
export class ArtifactDir {
  private constructor(readonly path: string) {}

  static async open(dir: string): Promise<ArtifactDir> {
    const fs = await import("node:fs/promises");
    await fs.mkdir(dir, { recursive: true });
    return new ArtifactDir(await fs.realpath(dir));
  }

  /** Writes art from chunks (its inline bytes, or a download) and returns
   * the file's path. */
  async write(art: Artifact, chunks: AsyncIterable<Uint8Array> | Iterable<Uint8Array>): Promise<string> {
    checkArtifactName(art.name);
    const fs = await import("node:fs/promises");
    const { constants } = await import("node:fs");
    const { join } = await import("node:path");
    const { createHash, randomBytes } = await import("node:crypto");
    const target = join(this.path, art.name);
    const st = await fs.lstat(target).catch((e: { code?: string }) => {
      if (e.code === "ENOENT") return undefined;
      throw e;
    });
    if (st && !st.isFile()) {
      const what = st.isSymbolicLink() ? "a symbolic link" : st.isDirectory() ? "a directory" : "not a regular file";
      throw Object.assign(new Error(`${target} is there already, ${what}: left alone`), { code: "EEXIST" });
    }
    const tmp = join(this.path, `.execgate-${randomBytes(8).toString("hex")}.tmp`);
    const fh = await fs.open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644);
    let done = false;
    try {
      const sha = createHash("sha256");
      let n = 0;
      for await (const chunk of chunks) {
        n += chunk.length;
        if (n > art.bytes) throw new ArtifactMismatch(`artifact ${JSON.stringify(art.name)}: more than the ${art.bytes} bytes listed`);
        sha.update(chunk);
        await fh.write(chunk);
      }
      const sum = sha.digest("hex");
      if (n !== art.bytes || (art.sha256 && sum !== art.sha256)) {
        throw new ArtifactMismatch(`artifact ${JSON.stringify(art.name)}: ${n} bytes with sha256 ${sum}, listed ${art.bytes} with ${art.sha256}`);
      }
      await fh.close();
      done = true;
      await fs.rename(tmp, target);
      return target;
    } catch (e) {
      if (!done) await fh.close().catch(() => undefined);
      await fs.unlink(tmp).catch(() => undefined);
      throw e;
    }
  }
}

/** The inline bytes of an artifact (base64 in the envelope), or undefined
 * when it must be fetched. */
export function artifactData(art: Artifact): Uint8Array | undefined {
  if (art.base64 === undefined || art.base64 === null) return undefined;
  const bin = atob(art.base64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
