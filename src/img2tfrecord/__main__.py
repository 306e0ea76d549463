"""`python -m img2tfrecord` is the same as the `img2tfrecord` command."""

from img2tfrecord.cli import main

if __name__ == "__main__":
    main()
