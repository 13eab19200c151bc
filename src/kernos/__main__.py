from kernos.cli import main

main()
