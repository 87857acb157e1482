'use strict'
// The one place the engine's error kinds become JavaScript errors. The native half encodes a
// kind as `[CODE@position] message` (see `to_js_error` in src/lib.rs); `translate` turns that
// into the `LapilliError` subclass for the code, with `code` and `position` set.

class LapilliError extends Error {
  /** `options.cause`: the error this one reports (for an engine error, the error the native
   * addon threw, whose message still carries the encoded code). */
  constructor(message, code, position, options) {
    super(message, options)
    this.name = new.target.name
    this.code = code
    if (position !== undefined) this.position = position
  }
}

class ConflictError extends LapilliError {}
class AlreadyExistsError extends LapilliError {}
class InvalidArgumentError extends LapilliError {}
class StoreLockedError extends LapilliError {}
class StoreClosedError extends LapilliError {}
class ReadOnlyError extends LapilliError {}
class CorruptionError extends LapilliError {}
class LapilliIOError extends LapilliError {}

const CLASSES = {
  CONFLICT: ConflictError,
  ALREADY_EXISTS: AlreadyExistsError,
  INVALID_ARGUMENT: InvalidArgumentError,
  STORE_LOCKED: StoreLockedError,
  CLOSED: StoreClosedError,
  READ_ONLY: ReadOnlyError,
  CORRUPTION: CorruptionError,
  IO: LapilliIOError,
}

const ENCODED = /^\[([A-Z_]+)(?:@(\d+))?\] ([\s\S]*)$/

/** Turns an error thrown by the native half into a LapilliError; anything else passes through. */
function translate(err) {
  if (!(err instanceof Error) || err instanceof LapilliError) return err
  const match = ENCODED.exec(err.message)
  if (match === null || !(match[1] in CLASSES)) return err
  const Class = CLASSES[match[1]]
  return new Class(match[3], match[1], match[2] === undefined ? undefined : Number(match[2]), { cause: err })
}

/** A LapilliError of `code` raised by this layer itself (same shape as the engine's). */
function lapilliError(code, message) {
  return new CLASSES[code](message, code)
}

module.exports = {
  LapilliError,
  ConflictError,
  AlreadyExistsError,
  InvalidArgumentError,
  StoreLockedError,
  StoreClosedError,
  ReadOnlyError,
  CorruptionError,
  LapilliIOError,
  translate,
  lapilliError,
}
