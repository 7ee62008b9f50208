// How a command writes its output: stdout is often a pipe to another program.

/** Writes to a stream, waiting when its buffer is full; a closed pipe (`| head`) stops output quietly. */
export class Output {
  broken = false;

  constructor(private readonly stream: NodeJS.WriteStream) {
    // EPIPE (the reader went away) or any other write error: stop writing rather than crash.
    stream.on('error', () => {
      this.broken = true;
    });
  }

  async line(text: string): Promise<void> {
    if (this.broken) return;
    if (!this.stream.write(`${text}\n`)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          this.stream.off('drain', done);
          this.stream.off('close', done);
          resolve();
        };
        this.stream.on('drain', done);
        this.stream.on('close', done);
      });
    }
  }
}
