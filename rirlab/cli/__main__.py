from rirlab.cli import main

main()
